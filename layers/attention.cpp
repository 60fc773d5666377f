#include "layers/attention.h"

#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"
#include "layers/sequence_checks.h"
#include "layers/tensor_parallel/mappings.h"

namespace pt {

namespace {

// Slots of the layer's context.
// kX: the input; with sequence parallelism this rank's chunk of it (backward_weight gathers the
//   sequence again, as Megatron-Core does, so the saved bytes are divided by T).
// kWholeDy: with sequence parallelism, the output gradient gathered by backward_input.
enum Saved : size_t { kX, kQkv, kAtt, kLse, kForwardSaves, kDqkv = kForwardSaves, kWholeDy };

}  // namespace

CausalSelfAttention::CausalSelfAttention(int64_t d_model, int64_t n_heads, int64_t context,
                                         float proj_init_std, const TensorParallel& tp)
    : Layer(std::string(kKind), Shape{context, d_model}),
      d_(d_model),
      H_(n_heads),
      context_(context),
      proj_init_std_(proj_init_std),
      tp_(tp) {
  require_positive(kKind, "context", context);
  require_positive(kKind, "d_model", d_model);
  require_positive(kKind, "n_heads", n_heads);
  if (d_model % n_heads != 0)
    throw ShapeError(
        fmt::format("{}: d_model {} is not divisible by n_heads {}; choose n_heads "
                    "dividing d_model (each head gets d_model / n_heads channels)",
                    kKind, d_model, n_heads));
  if (!(proj_init_std > 0.f))
    throw ShapeError(
        fmt::format("{}: proj_init_std must be positive but got {}", kKind, proj_init_std));
  split_size(tp, n_heads, kKind, "n_heads");  // heads split whole across the ranks
  if (sequence()) input_shape_[0] = context_chunk(tp, context, kKind);
  output_shape_ = input_shape_;
}

std::vector<ParamSpec> CausalSelfAttention::param_specs() const {
  const int64_t dl = local_width();
  std::vector<ParamSpec> specs{
      {"qkv.weight", Shape{3 * dl, d_}, ParamInit::normal(0.02f), {}},
      {"qkv.bias", Shape{3 * dl}, ParamInit::zeros(), {}},
      {"proj.weight", Shape{d_, dl}, ParamInit::normal(proj_init_std_), {}},
      {"proj.bias", Shape{d_}, ParamInit::zeros(), {}}};
  if (tp_.enabled()) {
    // q, k, v: three blocks of d rows, each split by heads; proj: its columns by heads.
    specs[0].shard = {0, tp_.rank, tp_.size, 3, Shape{3 * d_, d_}};
    specs[1].shard = {0, tp_.rank, tp_.size, 3, Shape{3 * d_}};
    specs[2].shard = {1, tp_.rank, tp_.size, 1, Shape{d_, d_}};
  }
  return specs;
}

LayerCost CausalSelfAttention::cost() const {
  // This rank's share: its heads' GEMM columns and attention pairs (all of them at T = 1).
  const double T = static_cast<double>(context_), d = static_cast<double>(d_);
  const double share = 1.0 / tp_.size;
  const double qkv = 2.0 * T * d * 3.0 * d * share, proj = 2.0 * T * d * d * share;
  // Per head, each of the T (T + 1) / 2 causal pairs (i, j) costs a Dh-long dot product or axpy
  // (2 Dh FLOPs) per (T, T, Dh) product: 2 in forward (q.k, p v), 5 in backward (q.k again,
  // dout.v, dv, dk, dq). Summed over heads: T (T + 1) d per product.
  const double pairs = T * (T + 1.0) * d * share;
  LayerCost c;
  c.forward_flops = qkv + proj + 2.0 * pairs;
  c.backward_input_flops = proj + qkv + 5.0 * pairs;  // da, dx, and the attention backward
  c.backward_weight_flops = proj + qkv;               // dWproj, dWqkv
  c.activation_bytes =
      (input_shape_[0] * d_ + context_ * local_width() * (3 + 1) + local_heads() * context_) *
      4;  // x (a chunk of the sequence with sequence parallelism), qkv, a, lse
  return c;
}

// ---- forward -------------------------------------------------------------------------------
// Below, dl = d / T and Hl = H / T are this rank's channels and heads (d and H at T = 1).
Tensor CausalSelfAttention::forward(const Tensor& x_in, LayerContext& ctx) {
  check_sequence(*this, "input", x_in, input_shape_[0], d_);
  require_bound(*this);
  Backend& be = ctx.backend();
  // With sequence parallelism x_in is this rank's chunk of the sequence: all-gather it.
  const Tensor x =
      sequence() ? gather_sequence(tp_, be, x_in, "attention: sequence of the input") : x_in;
  const int64_t B = x.shape()[0], T = x.shape()[1];
  const int64_t rows = B * T, Dh = head_dim(), dl = local_width(), Hl = local_heads();
  // qkv (rows, 3dl) = x (rows, d) Wqkv^T (d, 3dl) + bqkv
  Tensor qkv = ctx.alloc(Shape{B, T, 3 * dl});
  be.gemm_bias(false, true, rows, 3 * dl, d_, x.f32(), d_, params_[0].f32(), d_, params_[1].f32(),
               qkv.f32(), 3 * dl);
  // a (B, T, Hl, Dh), lse (B, Hl, T)
  Tensor att = ctx.alloc(Shape{B, T, dl});
  Tensor lse = ctx.alloc(Shape{B, Hl, T});
  be.attention_forward(qkv.f32(), att.f32(), lse.f32(), B, T, Hl, Dh,
                       1.f / std::sqrt(static_cast<float>(Dh)));
  // y (rows, d) = a (rows, dl) Wproj^T (dl, d) + bproj; with T > 1 the partial products are
  // summed over the ranks first and the bias added once after.
  // With sequence parallelism the sum is a reduce-scatter: each rank its chunk of the sequence.
  Tensor y = ctx.alloc(Shape{B, T, d_});
  if (tp_.enabled()) {
    be.gemm(false, true, rows, d_, dl, 1.f, att.f32(), dl, params_[2].f32(), dl, 0.f, y.f32(), d_);
    if (sequence())
      y = reduce_scatter_sequence(tp_, be, y, "attention: output projection");
    else
      all_reduce_output(tp_, be, y, "attention: output projection");
    be.add_bias(y.f32(), params_[3].f32(), y.numel() / d_, d_);
  } else {
    be.gemm_bias(false, true, rows, d_, d_, att.f32(), d_, params_[2].f32(), d_, params_[3].f32(),
                 y.f32(), d_);
  }
  if (ctx.info().training) {
    ctx.save(x_in);
    ctx.save(qkv);
    ctx.save(att);
    ctx.save(lse);
  }
  return y;
}

// ---- backward ------------------------------------------------------------------------------
const Tensor& CausalSelfAttention::saved_input(const Tensor& dy_in, LayerContext& ctx) const {
  check_sequence(*this, "gradient", dy_in, output_shape_[0], d_);
  require_bound(*this);
  const Tensor& x = saved_or_throw(*this, ctx, kX);
  require_same_dims(*this, dy_in.shape(), x.shape());
  return x;
}

Tensor CausalSelfAttention::partial_input_gradient(const Tensor& dy, LayerContext& ctx,
                                                   Tensor& dqkv) const {
  Backend& be = ctx.backend();
  const int64_t B = dy.shape()[0], T = dy.shape()[1];
  const int64_t rows = B * T, Dh = head_dim(), dl = local_width(), Hl = local_heads();
  // da (rows, dl) = dy (rows, d) Wproj (d, dl)
  Tensor datt = ctx.alloc(Shape{B, T, dl});
  be.gemm(false, false, rows, dl, d_, 1.f, dy.f32(), d_, params_[2].f32(), dl, 0.f, datt.f32(), dl);
  // dqkv (B, T, 3, Hl, Dh)
  dqkv = ctx.alloc(Shape{B, T, 3 * dl});
  be.attention_backward(ctx.saved(kQkv).f32(), ctx.saved(kAtt).f32(), datt.f32(),
                        ctx.saved(kLse).f32(), dqkv.f32(), B, T, Hl, Dh,
                        1.f / std::sqrt(static_cast<float>(Dh)));
  // dx (rows, d) = dqkv (rows, 3dl) Wqkv (3dl, d), to be summed over the ranks' heads
  Tensor dx = ctx.alloc(Shape{B, T, d_});
  be.gemm(false, false, rows, d_, 3 * dl, 1.f, dqkv.f32(), 3 * dl, params_[0].f32(), d_, 0.f,
          dx.f32(), d_);
  return dx;
}

void CausalSelfAttention::weight_gradients(const Tensor& dy, const Tensor& dqkv,
                                           const std::function<Tensor()>& x, LayerContext& ctx) {
  Backend& be = ctx.backend();
  const int64_t rows = dy.shape()[0] * dy.shape()[1], dl = local_width();
  // dWproj (d, dl) += dy^T (d, rows) a (rows, dl);  dbproj += sum over rows of dy
  be.gemm(true, false, d_, dl, rows, 1.f, dy.f32(), d_, ctx.saved(kAtt).f32(), dl, 1.f,
          grads_[2].f32(), dl);
  be.sum_rows_accumulate(dy.f32(), grads_[3].f32(), rows, d_);
  // dWqkv (3dl, d) += dqkv^T (3dl, rows) x (rows, d);  dbqkv += sum over rows of dqkv. x is
  // asked for only now: with sequence parallelism its re-gather may still be in flight.
  const Tensor whole_x = x();
  be.gemm(true, false, 3 * dl, d_, rows, 1.f, dqkv.f32(), 3 * dl, whole_x.f32(), d_, 1.f,
          grads_[0].f32(), d_);
  be.sum_rows_accumulate(dqkv.f32(), grads_[1].f32(), rows, 3 * dl);
}

Tensor CausalSelfAttention::backward_input(const Tensor& dy_in, LayerContext& ctx) {
  saved_input(dy_in, ctx);
  if (ctx.saved_count() != kForwardSaves)
    throw UsageError(fmt::format("{}: backward_input ran twice on one context without clear()",
                                 layer_label(*this)));
  Backend& be = ctx.backend();
  // With sequence parallelism dy_in is this rank's chunk: all-gather it (kept for dWproj).
  const Tensor dy =
      sequence() ? gather_sequence(tp_, be, dy_in, "attention: sequence of the gradient") : dy_in;
  Tensor dqkv;
  Tensor dx = partial_input_gradient(dy, ctx, dqkv);
  ctx.save(dqkv);  // for backward_weight
  if (sequence()) {
    ctx.save(dy);
    return reduce_scatter_sequence(tp_, be, dx, "attention: input gradient");
  }
  all_reduce_input_gradient(tp_, be, dx, "attention: input gradient");
  return dx;
}

void CausalSelfAttention::backward_weight(const Tensor& dy_in, LayerContext& ctx) {
  const Tensor& x_in = saved_input(dy_in, ctx);
  if (ctx.saved_count() != (sequence() ? kWholeDy + 1 : kForwardSaves + 1))
    throw UsageError(
        fmt::format("{}: backward_weight needs backward_input to run first on this "
                    "context",
                    layer_label(*this)));
  // With sequence parallelism the whole sequence's gradient that backward_input gathered, and
  // x gathered again from the saved chunk.
  const Tensor& dy = sequence() ? ctx.saved(kWholeDy) : dy_in;
  weight_gradients(
      dy, ctx.saved(kDqkv),
      [&] {
        return sequence() ? gather_sequence(tp_, ctx.backend(), x_in,
                                            "attention: sequence of the input, again")
                          : x_in;
      },
      ctx);
}

// Megatron-LM's order: the gradient's gather (needed at once), x's re-gather started, dx
// computed meanwhile and its collective started, the weight gradients computed meanwhile.
Tensor CausalSelfAttention::backward(const Tensor& dy_in, LayerContext& ctx) {
  if (!tp_.enabled()) return Layer::backward(dy_in, ctx);
  const Tensor& x_in = saved_input(dy_in, ctx);
  if (ctx.saved_count() != kForwardSaves)
    throw UsageError(
        fmt::format("{}: backward ran twice on one context without clear()", layer_label(*this)));
  Backend& be = ctx.backend();
  const Tensor dy =
      sequence() ? gather_sequence(tp_, be, dy_in, "attention: sequence of the gradient") : dy_in;
  std::optional<PendingTensor> whole_x;
  if (sequence())
    whole_x.emplace(
        start_gather_sequence(tp_, be, x_in, "attention: sequence of the input, again"));
  Tensor dqkv;
  const Tensor dx = partial_input_gradient(dy, ctx, dqkv);
  PendingTensor reduced =
      sequence() ? start_reduce_scatter_sequence(tp_, be, dx, "attention: input gradient")
                 : start_all_reduce_input_gradient(tp_, be, dx, "attention: input gradient");
  weight_gradients(
      dy, dqkv, [&] { return whole_x ? whole_x->wait() : x_in; }, ctx);
  return reduced.wait();
}

}  // namespace pt
