#include "layers/residual.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"

namespace pt {

Residual::Residual(Shape in, std::vector<std::unique_ptr<Layer>> body)
    : Layer(std::string(kKind), in), body_(std::move(body)) {
  if (body_.empty()) throw ShapeError("residual: the body is empty; add at least one layer");
  Shape cur = in;
  for (size_t i = 0; i < body_.size(); ++i) {
    const Layer* l = body_[i].get();
    if (l == nullptr) throw ShapeError(fmt::format("residual: body layer {} is null", i));
    if (l->input_dtype() != DType::f32)
      throw ShapeError(
          fmt::format("residual: body layer {} ({}) takes {} input; the residual "
                      "stream is F32",
                      i, l->kind(), dtype_name(l->input_dtype())));
    if (l->input_shape() != cur)
      throw ShapeError(fmt::format("residual: body layer {} ({}) expects input {} but gets {}", i,
                                   l->kind(), l->input_shape().str(), cur.str()));
    cur = l->output_shape();
  }
  if (cur != in)
    throw ShapeError(
        fmt::format("residual: the body maps {} to {}; its output must equal its "
                    "input to add them",
                    in.str(), cur.str()));
  output_shape_ = in;
}

std::vector<ParamSpec> Residual::param_specs() const {
  std::vector<ParamSpec> specs;
  for (size_t i = 0; i < body_.size(); ++i)
    for (ParamSpec s : body_[i]->param_specs()) {
      s.name = fmt::format("{}.{}", i, s.name);
      specs.push_back(std::move(s));
    }
  return specs;
}

LayerCost Residual::cost() const {
  LayerCost c;
  for (const auto& l : body_) {
    const LayerCost b = l->cost();
    c.forward_flops += b.forward_flops;
    c.backward_input_flops += b.backward_input_flops;
    c.backward_weight_flops += b.backward_weight_flops;
    c.activation_bytes += b.activation_bytes;
  }
  const double n = static_cast<double>(input_shape_.numel());
  c.forward_flops += n;         // x + body(x)
  c.backward_input_flops += n;  // dy + dbody
  return c;
}

void Residual::unbind() {
  Layer::unbind();
  for (auto& l : body_) l->unbind();
}

void Residual::bind(std::span<const Tensor> params, std::span<const Tensor> grads) {
  Layer::bind(params, grads);  // checks counts and shapes against param_specs()
  size_t at = 0;
  for (const auto& l : body_) {
    const size_t n = l->param_specs().size();
    l->bind(params.subspan(at, n), grads.subspan(at, n));
    at += n;
  }
}

// ---- forward -------------------------------------------------------------------------------
Tensor Residual::forward(const Tensor& x, LayerContext& ctx) {
  const int64_t B = check_batched(*this, "input", x, input_shape_);
  Tensor h = x;
  for (size_t i = 0; i < body_.size(); ++i) h = body_[i]->forward(h, ctx.child(i));
  Tensor y = ctx.alloc(output_shape_.with_batch(B));
  ctx.backend().add(x.f32(), h.f32(), y.f32(), y.numel());  // y = x + body(x)
  return y;
}

// ---- backward ------------------------------------------------------------------------------
Tensor Residual::backward_input(const Tensor& dy, LayerContext& ctx) {
  const int64_t B = check_batched(*this, "gradient", dy, output_shape_);
  if (ctx.saved_count() != 0)
    throw UsageError(fmt::format("{}: backward_input ran twice on one context without clear()",
                                 layer_label(*this)));
  // g runs from g_{n-1} = dy down to g_0; keep g_{n-2} .. g_0 for backward_weight (saved(k)
  // holds g_{n-2-k}).
  Tensor g = dy;
  for (size_t i = body_.size(); i-- > 0;) {
    if (i + 1 < body_.size()) ctx.save(g);
    g = body_[i]->backward_input(g, ctx.child(i));
  }
  Tensor dx = ctx.alloc(input_shape_.with_batch(B));
  ctx.backend().add(dy.f32(), g.f32(), dx.f32(), dx.numel());  // dx = dy + dbody
  return dx;
}

void Residual::backward_weight(const Tensor& dy, LayerContext& ctx) {
  check_batched(*this, "gradient", dy, output_shape_);
  const size_t n = body_.size();
  if (ctx.saved_count() != n - 1)
    throw UsageError(
        fmt::format("{}: backward_weight needs backward_input to run first on this "
                    "context (found {} of {} saved gradients)",
                    layer_label(*this), ctx.saved_count(), n - 1));
  for (size_t i = n; i-- > 0;) {
    const Tensor& g = i + 1 == n ? dy : ctx.saved(n - 2 - i);
    body_[i]->backward_weight(g, ctx.child(i));
  }
}

void Residual::complete_gradients(Backend& backend) {
  for (auto& layer : body_) layer->complete_gradients(backend);
}

}  // namespace pt
