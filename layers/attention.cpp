#include "layers/attention.h"

#include <cmath>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"
#include "layers/sequence_checks.h"

namespace pt {

namespace {

// Slots of the layer's context.
enum Saved : size_t { kX, kQkv, kAtt, kLse, kForwardSaves, kDqkv = kForwardSaves };

}  // namespace

CausalSelfAttention::CausalSelfAttention(int64_t d_model, int64_t n_heads, int64_t context,
                                         float proj_init_std)
    : Layer(std::string(kKind), Shape{context, d_model}),
      d_(d_model),
      H_(n_heads),
      context_(context),
      proj_init_std_(proj_init_std) {
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
  output_shape_ = input_shape_;
}

std::vector<ParamSpec> CausalSelfAttention::param_specs() const {
  return {{"qkv.weight", Shape{3 * d_, d_}, ParamInit::normal(0.02f)},
          {"qkv.bias", Shape{3 * d_}, ParamInit::zeros()},
          {"proj.weight", Shape{d_, d_}, ParamInit::normal(proj_init_std_)},
          {"proj.bias", Shape{d_}, ParamInit::zeros()}};
}

LayerCost CausalSelfAttention::cost() const {
  const double T = static_cast<double>(context_), d = static_cast<double>(d_);
  const double qkv = 2.0 * T * d * 3.0 * d, proj = 2.0 * T * d * d;
  // Per head, each of the T (T + 1) / 2 causal pairs (i, j) costs a Dh-long dot product or axpy
  // (2 Dh FLOPs) per (T, T, Dh) product: 2 in forward (q.k, p v), 5 in backward (q.k again,
  // dout.v, dv, dk, dq). Summed over heads: T (T + 1) d per product.
  const double pairs = T * (T + 1.0) * d;
  LayerCost c;
  c.forward_flops = qkv + proj + 2.0 * pairs;
  c.backward_input_flops = proj + qkv + 5.0 * pairs;  // da, dx, and the attention backward
  c.backward_weight_flops = proj + qkv;               // dWproj, dWqkv
  c.activation_bytes = (context_ * d_ * (1 + 3 + 1) + H_ * context_) * 4;  // x, qkv, a, lse
  return c;
}

// ---- forward -------------------------------------------------------------------------------
Tensor CausalSelfAttention::forward(const Tensor& x, LayerContext& ctx) {
  const auto [B, T] = check_sequence(*this, "input", x, context_, d_);
  require_bound(*this);
  Backend& be = ctx.backend();
  const int64_t rows = B * T, Dh = head_dim();
  // qkv (rows, 3d) = x (rows, d) Wqkv^T (d, 3d) + bqkv
  Tensor qkv = ctx.alloc(Shape{B, T, 3 * d_});
  be.gemm_bias(false, true, rows, 3 * d_, d_, x.f32(), d_, params_[0].f32(), d_, params_[1].f32(),
               qkv.f32(), 3 * d_);
  // a (B, T, H, Dh), lse (B, H, T)
  Tensor att = ctx.alloc(Shape{B, T, d_});
  Tensor lse = ctx.alloc(Shape{B, H_, T});
  be.attention_forward(qkv.f32(), att.f32(), lse.f32(), B, T, H_, Dh,
                       1.f / std::sqrt(static_cast<float>(Dh)));
  // y (rows, d) = a (rows, d) Wproj^T (d, d) + bproj
  Tensor y = ctx.alloc(Shape{B, T, d_});
  be.gemm_bias(false, true, rows, d_, d_, att.f32(), d_, params_[2].f32(), d_, params_[3].f32(),
               y.f32(), d_);
  if (ctx.info().training) {
    ctx.save(x);
    ctx.save(qkv);
    ctx.save(att);
    ctx.save(lse);
  }
  return y;
}

// ---- backward ------------------------------------------------------------------------------
Tensor CausalSelfAttention::backward_input(const Tensor& dy, LayerContext& ctx) {
  const auto [B, T] = check_sequence(*this, "gradient", dy, context_, d_);
  require_bound(*this);
  const Tensor& x = saved_or_throw(*this, ctx, kX);
  require_same_dims(*this, dy.shape(), x.shape());
  if (ctx.saved_count() != kForwardSaves)
    throw UsageError(fmt::format("{}: backward_input ran twice on one context without clear()",
                                 layer_label(*this)));
  Backend& be = ctx.backend();
  const int64_t rows = B * T, Dh = head_dim();
  // da (rows, d) = dy (rows, d) Wproj (d, d)
  Tensor datt = ctx.alloc(Shape{B, T, d_});
  be.gemm(false, false, rows, d_, d_, 1.f, dy.f32(), d_, params_[2].f32(), d_, 0.f, datt.f32(), d_);
  // dqkv (B, T, 3, H, Dh)
  Tensor dqkv = ctx.alloc(Shape{B, T, 3 * d_});
  be.attention_backward(ctx.saved(kQkv).f32(), ctx.saved(kAtt).f32(), datt.f32(),
                        ctx.saved(kLse).f32(), dqkv.f32(), B, T, H_, Dh,
                        1.f / std::sqrt(static_cast<float>(Dh)));
  // dx (rows, d) = dqkv (rows, 3d) Wqkv (3d, d)
  Tensor dx = ctx.alloc(Shape{B, T, d_});
  be.gemm(false, false, rows, d_, 3 * d_, 1.f, dqkv.f32(), 3 * d_, params_[0].f32(), d_, 0.f,
          dx.f32(), d_);
  ctx.save(dqkv);  // for backward_weight
  return dx;
}

void CausalSelfAttention::backward_weight(const Tensor& dy, LayerContext& ctx) {
  const auto [B, T] = check_sequence(*this, "gradient", dy, context_, d_);
  require_bound(*this);
  const Tensor& x = saved_or_throw(*this, ctx, kX);
  require_same_dims(*this, dy.shape(), x.shape());
  if (ctx.saved_count() != kForwardSaves + 1)
    throw UsageError(
        fmt::format("{}: backward_weight needs backward_input to run first on this "
                    "context",
                    layer_label(*this)));
  Backend& be = ctx.backend();
  const int64_t rows = B * T;
  const Tensor& dqkv = ctx.saved(kDqkv);
  // dWproj (d, d) += dy^T (d, rows) a (rows, d);  dbproj += sum over rows of dy
  be.gemm(true, false, d_, d_, rows, 1.f, dy.f32(), d_, ctx.saved(kAtt).f32(), d_, 1.f,
          grads_[2].f32(), d_);
  be.sum_rows_accumulate(dy.f32(), grads_[3].f32(), rows, d_);
  // dWqkv (3d, d) += dqkv^T (3d, rows) x (rows, d);  dbqkv += sum over rows of dqkv
  be.gemm(true, false, 3 * d_, d_, rows, 1.f, dqkv.f32(), 3 * d_, x.f32(), d_, 1.f, grads_[0].f32(),
          d_);
  be.sum_rows_accumulate(dqkv.f32(), grads_[1].f32(), rows, 3 * d_);
}

}  // namespace pt
