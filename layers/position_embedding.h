#pragma once
// Learned position embedding (GPT-2's wpe), added to the token embeddings:
//   x (B, T, d) -> y (B, T, d),  y[b, t] = x[b, t] + W[t],  W (context, d),  1 <= T <= context.
// Backward: dx = dy (returned as is, no copy);  dW[t] += sum over b of dy[b, t] for t < T (rows
// T .. context-1 are untouched). Saves nothing. Init (GPT-2): W normal(0, 0.02).
#include <cstdint>
#include <string_view>

#include "layers/layer.h"

namespace pt {

class PositionEmbedding final : public Layer {
 public:
  static constexpr std::string_view kKind = "position_embedding";

  // Per-sample input (context, d_model); shorter sequences are accepted too.
  PositionEmbedding(int64_t context, int64_t d_model);

  std::string_view kind() const override { return kKind; }
  int64_t context() const { return context_; }
  int64_t d_model() const { return d_; }

  std::vector<ParamSpec> param_specs() const override;
  LayerCost cost() const override;

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;
  void backward_weight(const Tensor& dy, LayerContext& ctx) override;

 private:
  int64_t context_, d_;
};

}  // namespace pt
