#include "layers/tensor_parallel/parallel_linear.h"

#include <cmath>
#include <optional>

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

// The per-sample shape `in` of a sequence-parallel layer is a sequence (T, ..., C).
void require_sequence_shape(const Shape& in, std::string_view what) {
  if (in.rank() < 2)
    throw ShapeError(
        fmt::format("{}: sequence parallelism needs a sequence input (T, ..., features) but got {}",
                    what, in.str()));
}

// A column-parallel layer's input as its GEMM sees it: with sequence parallelism the chunk
// (T / T, ...) gathered to (T, ...).
Shape gathered_input(Shape in, const TensorParallel& tp) {
  if (!tp.splits_sequence()) return in;
  require_sequence_shape(in, "column-parallel linear");
  in[0] *= tp.size;
  return in;
}

// A row-parallel layer's output shape: with sequence parallelism its chunk of the sequence.
Shape scattered_output(Shape out, const TensorParallel& tp) {
  if (!tp.splits_sequence()) return out;
  out[0] = context_chunk(tp, out[0], "row-parallel linear");
  return out;
}

}  // namespace

// ---- ColumnParallelLinear -------------------------------------------------------------------
ColumnParallelLinear::ColumnParallelLinear(Shape in, int64_t out_features, bool bias,
                                           const TensorParallel& tp)
    : Layer(std::string(Linear::kKind), in),
      tp_(tp),
      out_whole_(out_features),
      slice_(gathered_input(in, tp),
             split_size(tp, out_features, "column-parallel linear", "out_features"), bias) {
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

// The slice multiplies the gathered sequence but keeps only this rank's chunk of it.
LayerCost ColumnParallelLinear::cost() const {
  LayerCost c = slice_.cost();
  if (sequence()) c.activation_bytes /= tp_.size;
  return c;
}

void ColumnParallelLinear::bind(std::span<const Tensor> params, std::span<const Tensor> grads) {
  Layer::bind(params, grads);
  slice_.bind(params, grads);
}

void ColumnParallelLinear::unbind() {
  Layer::unbind();
  slice_.unbind();
}

// With sequence parallelism the context keeps the input's chunk, not the gathered sequence
// (1/T of the bytes until backward), and backward_weight gathers it again (Megatron-Core's
// ColumnParallelLinear does the same): one more all-gather per micro-batch for activation
// memory divided by T.
Tensor ColumnParallelLinear::forward(const Tensor& x, LayerContext& ctx) {
  if (!sequence()) return slice_.forward(x, ctx);
  check_batched_sequence(*this, "input", x, input_shape_, 2);
  const Tensor whole =
      gather_sequence(tp_, ctx.backend(), x, "column-parallel linear: sequence of the input");
  Tensor y = slice_.product(whole, ctx);
  if (ctx.info().training) ctx.save(x);
  return y;
}

Tensor ColumnParallelLinear::backward_input(const Tensor& dy, LayerContext& ctx) {
  Tensor dx = slice_.backward_input(dy, ctx);
  if (sequence())
    return reduce_scatter_sequence(tp_, ctx.backend(), dx,
                                   "column-parallel linear: input gradient");
  all_reduce_input_gradient(tp_, ctx.backend(), dx, "column-parallel linear: input gradient");
  return dx;
}

Tensor ColumnParallelLinear::backward(const Tensor& dy, LayerContext& ctx) {
  return backward_overlapped(dy, ctx, {});
}

// Megatron-LM's order (LinearWithGradAccumulationAndAsyncCommunication): start the input's
// re-gather, compute dx, start dx's collective, compute dW (after `meanwhile`), wait for dx.
// The same GEMMs on the same operands as backward_input + backward_weight: the same bits.
Tensor ColumnParallelLinear::backward_overlapped(const Tensor& dy, LayerContext& ctx,
                                                 const std::function<void()>& meanwhile) {
  Backend& be = ctx.backend();
  std::optional<PendingTensor> whole_input;
  if (sequence())
    whole_input.emplace(start_gather_sequence(tp_, be, saved_or_throw(*this, ctx, 0),
                                              "column-parallel linear: sequence of the input, "
                                              "again"));
  const Tensor dx = slice_.backward_input(dy, ctx);
  PendingTensor reduced =
      sequence()
          ? start_reduce_scatter_sequence(tp_, be, dx, "column-parallel linear: input gradient")
          : start_all_reduce_input_gradient(tp_, be, dx, "column-parallel linear: input gradient");
  if (meanwhile) meanwhile();
  if (whole_input)
    slice_.weight_gradient(dy, whole_input->wait(), ctx);
  else
    slice_.backward_weight(dy, ctx);
  return reduced.wait();
}

void ColumnParallelLinear::backward_weight(const Tensor& dy, LayerContext& ctx) {
  if (!sequence()) return slice_.backward_weight(dy, ctx);
  const Tensor whole = gather_sequence(tp_, ctx.backend(), saved_or_throw(*this, ctx, 0),
                                       "column-parallel linear: sequence of the input, again");
  slice_.weight_gradient(dy, whole, ctx);
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
  if (sequence()) require_sequence_shape(in, "row-parallel linear");
  output_shape_ = scattered_output(slice_.output_shape(), tp);
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

// Slots of the context: the slice's (its input x), then with sequence parallelism the gathered
// output gradient, from backward_input for backward_weight.
enum RowSaved : size_t { kRowX, kRowWholeDy };

Tensor RowParallelLinear::forward(const Tensor& x, LayerContext& ctx) {
  Tensor y = slice_.forward(x, ctx);
  Backend& be = ctx.backend();
  if (sequence())
    y = reduce_scatter_sequence(tp_, be, y, "row-parallel linear: output");
  else
    all_reduce_output(tp_, be, y, "row-parallel linear: output");
  if (separate_bias()) {
    const int64_t out = slice_.out_features();
    be.add_bias(y.f32(), params_[1].f32(), y.numel() / out, out);
  }
  return y;
}

Tensor RowParallelLinear::backward_input(const Tensor& dy, LayerContext& ctx) {
  if (!sequence()) return slice_.backward_input(dy, ctx);
  check_batched_sequence(*this, "gradient", dy, output_shape_, 2);
  if (ctx.saved_count() != kRowWholeDy)
    throw UsageError(
        fmt::format("{}: backward_input needs forward's saved input and must run once per forward",
                    layer_label(*this)));
  Tensor whole =
      gather_sequence(tp_, ctx.backend(), dy, "row-parallel linear: sequence of the gradient");
  ctx.save(whole);
  return slice_.backward_input(whole, ctx);
}

void RowParallelLinear::backward_weight(const Tensor& dy, LayerContext& ctx) {
  const bool unwritten = ctx.gradients_unwritten();
  // With sequence parallelism the whole sequence's gradient that backward_input gathered.
  const Tensor& g = sequence() ? saved_or_throw(*this, ctx, kRowWholeDy) : dy;
  slice_.backward_weight(g, ctx);
  if (separate_bias()) {
    Backend& be = ctx.backend();
    const int64_t out = slice_.out_features();
    if (unwritten) be.fill(grads_[1].f32(), 0.f, out);
    be.sum_rows_accumulate(g.f32(), grads_[1].f32(), g.numel() / out, out);
  }
}

}  // namespace pt
