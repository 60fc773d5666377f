#include "layers/position_embedding.h"

#include "layers/layer_checks.h"
#include "layers/sequence_checks.h"

namespace pt {

PositionEmbedding::PositionEmbedding(int64_t context, int64_t d_model)
    : Layer(std::string(kKind), Shape{context, d_model}), context_(context), d_(d_model) {
  require_positive(kKind, "context", context);
  require_positive(kKind, "d_model", d_model);
  output_shape_ = input_shape_;
}

std::vector<ParamSpec> PositionEmbedding::param_specs() const {
  return {{"weight", Shape{context_, d_}, ParamInit::normal(0.02f)}};
}

LayerCost PositionEmbedding::cost() const {
  const double n = static_cast<double>(context_ * d_);
  LayerCost c;
  c.forward_flops = n;          // x + W
  c.backward_weight_flops = n;  // dW += dy
  return c;                     // dx = dy costs nothing; nothing is saved
}

// ---- forward -------------------------------------------------------------------------------
Tensor PositionEmbedding::forward(const Tensor& x, LayerContext& ctx) {
  const auto [B, T] = check_sequence(*this, "input", x, context_, d_);
  require_bound(*this);
  Backend& be = ctx.backend();
  Tensor y = ctx.alloc(x.shape());
  // y[b] (T, d) = x[b] (T, d) + W[0, T) (T, d)
  const int64_t n = T * d_;
  for (int64_t b = 0; b < B; ++b) be.add(x.f32() + b * n, params_[0].f32(), y.f32() + b * n, n);
  return y;
}

// ---- backward ------------------------------------------------------------------------------
Tensor PositionEmbedding::backward_input(const Tensor& dy, LayerContext& ctx) {
  (void)ctx;
  check_sequence(*this, "gradient", dy, context_, d_);
  return dy;  // y = x + W: the identity in x
}

void PositionEmbedding::backward_weight(const Tensor& dy, LayerContext& ctx) {
  const auto [B, T] = check_sequence(*this, "gradient", dy, context_, d_);
  require_bound(*this);
  // dW[0, T) viewed as (T d) += sum over the B rows of dy viewed as (B, T d)
  ctx.backend().sum_rows_accumulate(dy.f32(), grads_[0].f32(), B, T * d_);
}

}  // namespace pt
