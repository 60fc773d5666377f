#pragma once
// Linear (PyTorch nn.Linear) over the LAST dimension, so it applies to sequences too:
//   x (B, ..., in) -> y (B, ..., out),   y = x W^T + b,   W (out, in), b (out).
// Backward, with rows = B * (product of the middle dimensions):
//   dx (rows, in)  = dy (rows, out) W (out, in)
//   dW (out, in)  += dy^T (out, rows) x (rows, in)      db (out) += sum over rows of dy
// Built on a sequence (T, ..., in), it also runs on a shorter one: x (B, T', ..., in) with
// 1 <= T' <= T gives y (B, T', ..., out).
// Init (PyTorch's kaiming_uniform(a = sqrt 5)): W and b uniform in [-1/sqrt(in), 1/sqrt(in)).
#include <cstdint>
#include <string_view>

#include "layers/layer.h"

namespace pt {

class Linear final : public Layer {
 public:
  static constexpr std::string_view kKind = "linear";

  // in: the per-sample input shape (..., in_features).
  Linear(Shape in, int64_t out_features, bool bias = true);

  // For callers that name in_features explicitly (PyTorch style): throws ShapeError
  // "linear: expects input (..., 784) but got (28, 28); add .flatten() before it" unless the
  // per-sample shape `in` ends in in_features.
  static void check_in_features(const Shape& in, int64_t in_features);

  std::string_view kind() const override { return kKind; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  bool has_bias() const { return bias_; }

  std::vector<ParamSpec> param_specs() const override;
  LayerCost cost() const override;
  // Declared column (or vocab: the LM head, whose split logits feed the vocab-parallel loss):
  // a ColumnParallelLinear, which gathers the sequence when its input is a sequence-parallel
  // chunk; row: a RowParallelLinear, which must follow a split activation and gives a whole one
  // (layers/tensor_parallel/parallel_linear.h).
  std::unique_ptr<Layer> shard_for(const TensorParallel& tp, ActivationSplit input) const override;

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;
  void backward_weight(const Tensor& dy, LayerContext& ctx) override;
  bool writes_unwritten_gradients() const override { return true; }

  // forward's two halves, for a layer that keeps its input in another form than the one it
  // multiplies (a sequence-parallel column layer saves its chunk of the sequence, not the
  // gathered whole): y = x W^T + b, nothing saved; and backward_weight with that x given.
  Tensor product(const Tensor& x, LayerContext& ctx) const;
  void weight_gradient(const Tensor& dy, const Tensor& x, LayerContext& ctx);

 private:
  int64_t in_ = 0, out_ = 0;
  bool bias_ = true;
};

}  // namespace pt
