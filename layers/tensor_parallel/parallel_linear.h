#pragma once
// The two halves of a tensor-parallel linear pair (Shoeybi et al. 2019, Megatron-LM):
//
//   ColumnParallelLinear  W (out, in) split by rows (output features): rank t computes
//       y_t = x W_t^T + b_t, its slice of the output features; x is whole on every rank.
//       backward: dx = sum_t dy_t W_t (all-reduce), dW_t, db_t from the rank's own slice.
//   RowParallelLinear     W (out, in) split by columns (input features): rank t takes the slice
//       x_t of the features a column-parallel layer produced and computes x_t W_t^T; the sum
//       over ranks (all-reduce) plus the whole bias is the output, whole on every rank.
//       backward: dx_t = dy W_t (no collective), dW_t += dy^T x_t, db += sum dy (the same on
//       every rank: the bias is replicated).
//
// Between them any element-wise layer runs on the slice, so a pair (an MLP, attention's QKV and
// output projection) costs one all-reduce forward and one backward. Both compute through a
// Linear of the slice's shape; with one rank each is exactly a Linear (the same calls).
// Parameters keep the Linear's names, order and initial distribution (of the whole layer:
// uniform in +-1/sqrt(in_features of the whole)), and declare their slice (ParamShard).
//
// Sequence parallelism (built with tp.sequence_parallel and T > 1; mappings.h): the whole
// activations outside the pair are chunks of the sequence, so the per-sample shapes are
// sequences (T, ..., features). The column layer takes its chunk (T/T, ..., in), all-gathers the
// sequence before its GEMM, keeps the chunk (not the gathered sequence) for dW and gathers it
// again in backward_weight, and reduce-scatters its input gradient; the row layer reduce-scatters
// its partial output (then adds the bias to its chunk) and all-gathers the output gradient,
// which it keeps for backward_weight (dW and the bias gradient from the whole sequence: the
// same sums as without sequence parallelism, so the bias stays a replica with no extra sum).
#include <cstdint>
#include <functional>
#include <string_view>

#include "layers/layer.h"
#include "layers/linear.h"
#include "layers/tensor_parallel/group.h"

namespace pt {

class ColumnParallelLinear final : public Layer {
 public:
  // in: the per-sample input (..., in_features), whole; with sequence parallelism this rank's
  // chunk (T / T, ..., in_features) of a sequence. out_features: of the whole layer.
  ColumnParallelLinear(Shape in, int64_t out_features, bool bias, const TensorParallel& tp);

  std::string_view kind() const override { return Linear::kKind; }  // a slice of a linear
  // The features split; the sequence whole (gathered).
  ActivationSplit output_split(ActivationSplit) const override { return {true, false}; }
  std::vector<ParamSpec> param_specs() const override;
  LayerCost cost() const override;
  void bind(std::span<const Tensor> params, std::span<const Tensor> grads) override;
  void unbind() override;

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;
  void backward_weight(const Tensor& dy, LayerContext& ctx) override;
  // Both, overlapped: the input gradient's all-reduce (reduce-scatter) runs while dW is
  // computed, and with sequence parallelism the input's re-gather while dx is.
  Tensor backward(const Tensor& dy, LayerContext& ctx) override;
  // backward, with `meanwhile` (a composite's other weight gradients, which must start no
  // collective) run while the input gradient's collective is in flight, before this dW.
  Tensor backward_overlapped(const Tensor& dy, LayerContext& ctx,
                             const std::function<void()>& meanwhile);
  bool writes_unwritten_gradients() const override { return true; }

 private:
  bool sequence() const { return tp_.splits_sequence(); }

  TensorParallel tp_;
  int64_t out_whole_;
  Linear slice_;  // (in) -> (out / T); with sequence parallelism built for the gathered sequence
};

class RowParallelLinear final : public Layer {
 public:
  // in: the per-sample input slice (..., in_features / T); in_features: of the whole layer.
  // With sequence parallelism `in` is a sequence (T, ..., in_features / T) and the output this
  // rank's chunk (T / T, ..., out_features).
  RowParallelLinear(Shape in, int64_t in_features, int64_t out_features, bool bias,
                    const TensorParallel& tp);

  std::string_view kind() const override { return Linear::kKind; }
  // The features whole (summed); the sequence split with sequence parallelism.
  ActivationSplit output_split(ActivationSplit) const override { return {false, sequence()}; }
  std::vector<ParamSpec> param_specs() const override;
  LayerCost cost() const override;
  void bind(std::span<const Tensor> params, std::span<const Tensor> grads) override;
  void unbind() override;

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;
  void backward_weight(const Tensor& dy, LayerContext& ctx) override;
  bool writes_unwritten_gradients() const override { return true; }

 private:
  // With T > 1 the bias is added once, after the all-reduce (each rank's slice GEMM has none);
  // with T = 1 the slice is the whole Linear, bias included.
  bool separate_bias() const { return bias_ && tp_.enabled(); }
  bool sequence() const { return tp_.splits_sequence(); }

  TensorParallel tp_;
  int64_t in_whole_;
  bool bias_;
  Linear slice_;  // (in / T) -> (out), without the bias when separate_bias()
};

}  // namespace pt
