#pragma once
// LayerNorm (PyTorch nn.LayerNorm(C)) over the last dimension:
//   x (B, ..., C) -> y (B, ..., C),  y = (x - mean) * rstd * gamma + beta,
//   mean, rstd = 1/sqrt(var + eps) per row (biased variance), rows = B * (middle dimensions).
// Backward (xhat = (x - mean) * rstd, g = dy * gamma):
//   dx = rstd * (g - mean_C(g) - xhat * mean_C(g * xhat))
//   dgamma (C) += sum over rows of dy * xhat      dbeta (C) += sum over rows of dy
// Built on a sequence (T, ..., C), it also runs on a shorter one: x (B, T', ..., C), 1 <= T' <= T.
// Params "weight" (gamma, ones) and "bias" (beta, zeros). Saves x, mean (rows), rstd (rows).
#include <string_view>

#include "layers/layer.h"

namespace pt {

class LayerNorm final : public Layer {
 public:
  static constexpr std::string_view kKind = "layernorm";

  explicit LayerNorm(Shape in, float eps = 1e-5f);

  std::string_view kind() const override { return kKind; }
  float eps() const { return eps_; }
  std::vector<ParamSpec> param_specs() const override;
  LayerCost cost() const override;

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;
  void backward_weight(const Tensor& dy, LayerContext& ctx) override;

 private:
  float eps_;
  int64_t C_ = 0;
};

}  // namespace pt
