#pragma once
// LayerNorm (PyTorch nn.LayerNorm(C)) over the last dimension:
//   x (B, ..., C) -> y (B, ..., C),  y = (x - mean) * rstd * gamma + beta,
//   mean, rstd = 1/sqrt(var + eps) per row (biased variance), rows = B * (middle dimensions).
// Backward (xhat = (x - mean) * rstd, g = dy * gamma):
//   dx = rstd * (g - mean_C(g) - xhat * mean_C(g * xhat))
//   dgamma (C) += sum over rows of dy * xhat      dbeta (C) += sum over rows of dy
// Built on a sequence (T, ..., C), it also runs on a shorter one: x (B, T', ..., C), 1 <= T' <= T.
// Params "weight" (gamma, ones) and "bias" (beta, zeros). Saves x, mean (rows), rstd (rows).
//
// Sequence parallelism (built with tp.sequence_parallel and T > 1: shard_for on a chunk of the
// sequence, or a transformer block's norms): each rank normalises its chunk of the tokens, with
// the parameters whole on every rank (a replica). Its dgamma and dbeta are then sums over its
// chunk only: each rank accumulates its chunks' sums over the step's micro-batches, and
// complete_gradients all-reduces them (2 C floats) over the group once a step, as Megatron-Core
// does with the gradients of its sequence-parallel parameters. Every rank so ends with the same
// bits, and the parameters stay equal. The addition order differs from one device's (per rank
// and micro-batch, then over the ranks), so the gradients match it to rounding, not in bits.
#include <string_view>

#include "layers/layer.h"
#include "layers/tensor_parallel/group.h"

namespace pt {

class LayerNorm final : public Layer {
 public:
  static constexpr std::string_view kKind = "layernorm";

  explicit LayerNorm(Shape in, float eps = 1e-5f, const TensorParallel& tp = {});

  std::string_view kind() const override { return kKind; }
  float eps() const { return eps_; }
  // Whether it runs on a chunk of the sequence and completes its gradients over the group.
  bool sequence() const { return tp_.splits_sequence(); }
  // Per token: on a chunk of the sequence, rebuilt for the chunk (sequence parallelism); it
  // cannot take a slice of its features.
  std::unique_ptr<Layer> shard_for(const TensorParallel& tp, ActivationSplit input) const override;
  std::vector<ParamSpec> param_specs() const override;
  LayerCost cost() const override;
  void complete_gradients(Backend& backend) override;

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;
  void backward_weight(const Tensor& dy, LayerContext& ctx) override;

 private:
  float eps_;
  int64_t C_ = 0;
  TensorParallel tp_;
};

}  // namespace pt
