#include "layers/tensor_parallel/parallel_linear.h"

#include <cmath>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"
#include "layers/tensor_parallel/mappings.h"

namespace pt {

namespace {

int64_t last_dim(const Shape& in, std::string_view what) {
  if (in.rank() == 0)
    throw ShapeError(
        fmt::format("{}: expects input (..., in_features) but got {}", what, in.str()));
  return in.back();
}

// The whole Linear's initial distribution (PyTorch's default for in_features inputs).
ParamInit linear_init(int64_t in_features) {
  return ParamInit::uniform(1.f / std::sqrt(static_cast<float>(in_features)));
}

ParamShard shard_of(const TensorParallel& tp, int dim, Shape whole) {
  return ParamShard{dim, tp.rank, tp.size, 1, whole};
}

}  // namespace

// ---- ColumnParallelLinear -------------------------------------------------------------------
ColumnParallelLinear::ColumnParallelLinear(Shape in, int64_t out_features, bool bias,
                                           const TensorParallel& tp)
    : Layer(std::string(Linear::kKind), in),
      tp_(tp),
      out_whole_(out_features),
      slice_(in, split_size(tp, out_features, "column-parallel linear", "out_features"), bias) {
  output_shape_ = slice_.output_shape();
}

std::vector<ParamSpec> ColumnParallelLinear::param_specs() const {
  std::vector<ParamSpec> specs = slice_.param_specs();
  const int64_t in = slice_.in_features();
  for (ParamSpec& s : specs) {
    s.init = linear_init(in);
    if (tp_.enabled())
      s.shard = shard_of(tp_, 0, s.name == "weight" ? Shape{out_whole_, in} : Shape{out_whole_});
  }
  return specs;
}

void ColumnParallelLinear::bind(std::span<const Tensor> params, std::span<const Tensor> grads) {
  Layer::bind(params, grads);
  slice_.bind(params, grads);
}

void ColumnParallelLinear::unbind() {
  Layer::unbind();
  slice_.unbind();
}

Tensor ColumnParallelLinear::forward(const Tensor& x, LayerContext& ctx) {
  return slice_.forward(x, ctx);
}

Tensor ColumnParallelLinear::backward_input(const Tensor& dy, LayerContext& ctx) {
  Tensor dx = slice_.backward_input(dy, ctx);
  all_reduce_input_gradient(tp_, ctx.backend(), dx, "column-parallel linear: input gradient");
  return dx;
}

void ColumnParallelLinear::backward_weight(const Tensor& dy, LayerContext& ctx) {
  slice_.backward_weight(dy, ctx);
}

// ---- RowParallelLinear ----------------------------------------------------------------------
RowParallelLinear::RowParallelLinear(Shape in, int64_t in_features, int64_t out_features, bool bias,
                                     const TensorParallel& tp)
    : Layer(std::string(Linear::kKind), in),
      tp_(tp),
      in_whole_(in_features),
      bias_(bias),
      slice_(in, out_features, bias && !tp.enabled()) {
  const int64_t part = split_size(tp, in_features, "row-parallel linear", "in_features");
  if (last_dim(in, "row-parallel linear") != part)
    throw ShapeError(fmt::format(
        "row-parallel linear: rank {} of {} expects its slice (..., {}) of the {} input features "
        "but got {}; a row-parallel linear follows a column-parallel one",
        tp.rank, tp.size, part, in_features, in.str()));
  output_shape_ = slice_.output_shape();
}

std::vector<ParamSpec> RowParallelLinear::param_specs() const {
  std::vector<ParamSpec> specs = slice_.param_specs();
  const int64_t out = slice_.out_features();
  for (ParamSpec& s : specs) {
    s.init = linear_init(in_whole_);
    if (tp_.enabled() && s.name == "weight") s.shard = shard_of(tp_, 1, Shape{out, in_whole_});
  }
  if (separate_bias()) specs.push_back({"bias", Shape{out}, linear_init(in_whole_), {}});
  return specs;
}

// The all-reduce's sum and the bias add are not counted (as Linear does not count its bias).
LayerCost RowParallelLinear::cost() const { return slice_.cost(); }

void RowParallelLinear::bind(std::span<const Tensor> params, std::span<const Tensor> grads) {
  Layer::bind(params, grads);
  const size_t n = separate_bias() ? 1 : params.size();
  slice_.bind(params.first(n), grads.first(n));
}

void RowParallelLinear::unbind() {
  Layer::unbind();
  slice_.unbind();
}

Tensor RowParallelLinear::forward(const Tensor& x, LayerContext& ctx) {
  Tensor y = slice_.forward(x, ctx);
  Backend& be = ctx.backend();
  all_reduce_output(tp_, be, y, "row-parallel linear: output");
  if (separate_bias()) {
    const int64_t out = slice_.out_features();
    be.add_bias(y.f32(), params_[1].f32(), y.numel() / out, out);
  }
  return y;
}

Tensor RowParallelLinear::backward_input(const Tensor& dy, LayerContext& ctx) {
  return slice_.backward_input(dy, ctx);
}

void RowParallelLinear::backward_weight(const Tensor& dy, LayerContext& ctx) {
  const bool unwritten = ctx.gradients_unwritten();
  slice_.backward_weight(dy, ctx);
  if (separate_bias()) {
    Backend& be = ctx.backend();
    const int64_t out = slice_.out_features();
    if (unwritten) be.fill(grads_[1].f32(), 0.f, out);
    be.sum_rows_accumulate(dy.f32(), grads_[1].f32(), dy.numel() / out, out);
  }
}

}  // namespace pt
