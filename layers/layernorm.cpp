#include "layers/layernorm.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"
#include "layers/tensor_parallel/mappings.h"

namespace pt {

namespace {
// A per-sample input of rank >= 2 is a sequence (T, ..., C): forward also takes T' < T.
constexpr int kSequenceRank = 2;
}  // namespace

LayerNorm::LayerNorm(Shape in, float eps, const TensorParallel& tp)
    : Layer(std::string(kKind), in), eps_(eps), tp_(tp) {
  if (in.rank() == 0)
    throw ShapeError(fmt::format("layernorm: expects input (..., C) but got {}", in.str()));
  C_ = in.back();
  require_positive(kKind, "input size", in.numel());
  if (!(eps > 0.f))
    throw ShapeError(fmt::format("layernorm: eps must be positive but got {}", eps));
  output_shape_ = in;
}

std::unique_ptr<Layer> LayerNorm::shard_for(const TensorParallel& tp, ActivationSplit input) const {
  if (input.features)
    throw ShapeError(fmt::format(
        "{} follows a column-parallel layer, whose output each rank holds a slice of the "
        "features of, but it normalises over all of them; move it after the row-parallel layer "
        "that closes the pair",
        layer_label(*this)));
  if (!input.sequence) return Layer::shard_for(tp, input);
  if (!tp.sequence_parallel)
    throw ShapeError(fmt::format(
        "{}: its input is split along the sequence but the tensor-parallel group does not say "
        "sequence parallelism",
        layer_label(*this)));
  Shape chunk = input_shape_;
  if (chunk.rank() < 2)
    throw ShapeError(fmt::format("{}: its input {} is not a sequence (T, ..., C) to split",
                                 layer_label(*this), input_shape_.str()));
  chunk[0] = context_chunk(tp, chunk[0], layer_label(*this));
  auto shard = std::make_unique<LayerNorm>(chunk, eps_, tp);
  shard->set_name(name_);
  return shard;
}

std::vector<ParamSpec> LayerNorm::param_specs() const {
  return {{"weight", Shape{C_}, ParamInit::ones()}, {"bias", Shape{C_}, ParamInit::zeros()}};
}

LayerCost LayerNorm::cost() const {
  const double n = static_cast<double>(input_shape_.numel());
  LayerCost c;
  c.forward_flops = 8.0 * n;          // mean, variance, normalise, scale and shift
  c.backward_input_flops = 10.0 * n;  // two row reductions and the combination
  c.backward_weight_flops = 4.0 * n;  // dgamma, dbeta
  c.activation_bytes = (input_shape_.numel() + 2 * input_shape_.rows()) * 4;  // x, mean, rstd
  return c;
}

// ---- forward -------------------------------------------------------------------------------
// On a sequence (T, C) the layer also accepts a shorter T' (check_batched_sequence); rows count
// what came: rows = B * T'.
Tensor LayerNorm::forward(const Tensor& x, LayerContext& ctx) {
  const Shape xs = check_batched_sequence(*this, "input", x, input_shape_, kSequenceRank);
  require_bound(*this);
  const int64_t rows = xs.rows();
  Tensor y = ctx.alloc(xs);
  Tensor mean = ctx.alloc(Shape{rows});
  Tensor rstd = ctx.alloc(Shape{rows});
  ctx.backend().layernorm_forward(x.f32(), params_[0].f32(), params_[1].f32(), y.f32(), mean.f32(),
                                  rstd.f32(), rows, C_, eps_);
  if (ctx.info().training) {
    ctx.save(x);
    ctx.save(mean);
    ctx.save(rstd);
  }
  return y;
}

// ---- backward ------------------------------------------------------------------------------
Tensor LayerNorm::backward_input(const Tensor& dy, LayerContext& ctx) {
  const Shape dys = check_batched_sequence(*this, "gradient", dy, output_shape_, kSequenceRank);
  require_bound(*this);
  const Tensor& x = saved_or_throw(*this, ctx, 0);
  require_same_rows(*this, dys, x.shape());
  const int64_t rows = dys.rows();
  Tensor dx = ctx.alloc(dys);
  ctx.backend().layernorm_backward_input(dy.f32(), x.f32(), params_[0].f32(), ctx.saved(1).f32(),
                                         ctx.saved(2).f32(), dx.f32(), rows, C_);
  return dx;
}

void LayerNorm::backward_weight(const Tensor& dy, LayerContext& ctx) {
  const Shape dys = check_batched_sequence(*this, "gradient", dy, output_shape_, kSequenceRank);
  require_bound(*this);
  const Tensor& x = saved_or_throw(*this, ctx, 0);
  require_same_rows(*this, dys, x.shape());
  const int64_t rows = dys.rows();
  Backend& be = ctx.backend();
  // With sequence parallelism these are this rank's chunks' sums: complete_gradients adds the
  // ranks' once the step's micro-batches are in.
  be.layernorm_backward_weight(dy.f32(), x.f32(), ctx.saved(1).f32(), ctx.saved(2).f32(),
                               grads_[0].f32(), grads_[1].f32(), rows, C_);
}

void LayerNorm::complete_gradients(Backend& be) {
  if (!sequence()) return;
  require_bound(*this);
  // (dgamma, dbeta) in one all-reduce.
  Tensor both = be.empty(Shape{2 * C_});
  const size_t bytes = static_cast<size_t>(C_) * sizeof(float);
  be.copy_within(both.f32(), grads_[0].f32(), bytes);
  be.copy_within(both.f32() + C_, grads_[1].f32(), bytes);
  tp_.group->all_reduce_sum(be, both.f32(), both.numel(),
                            "layernorm (sequence parallel): weight and bias gradients");
  be.copy_within(grads_[0].f32(), both.f32(), bytes);
  be.copy_within(grads_[1].f32(), both.f32() + C_, bytes);
}

}  // namespace pt
