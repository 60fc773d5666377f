#pragma once
// Losses. forward returns this micro-batch's share of the GLOBAL batch mean (see Loss in
// layer.h), so the shares of all micro-batches add up to the full-batch loss.
//
// SoftmaxCrossEntropy (PyTorch nn.CrossEntropyLoss, mean reduction):
//   logits (B, classes), labels (B) int32             loss = sum_b -log softmax(z_b)[y_b] / G
//   logits (B, T', classes), labels (B, T') int32     loss = sum_{b,t} ... / (G T')
//     (built for T, it takes any 1 <= T' <= T: the mean is over the tokens present)
//   dlogits = (softmax(z) - onehot(y)) / divisor.   G = global batch. Saves probs and labels.
// MseLoss (PyTorch nn.MSELoss, mean reduction over every element of the global batch):
//   pred (B, ...), target (B, ...) f32                loss = sum (pred - target)^2 / (G numel)
//   dpred = 2 (pred - target) / (G numel).   Saves pred and target (references, no copy).
//
// The global batch G of the micro-batch in flight is remembered by the loss object between
// forward and backward (every micro-batch of a step has the same global batch); the rest of the
// divisor (T') comes from the tensors forward saved.
#include <cstdint>
#include <memory>
#include <string_view>

#include "layers/layer.h"

namespace pt {

class SoftmaxCrossEntropy final : public Loss {
 public:
  static constexpr std::string_view kKind = "softmax_cross_entropy";

  // in: the per-sample prediction shape, (classes) or (T, classes).
  explicit SoftmaxCrossEntropy(Shape in);

  std::string_view kind() const override { return kKind; }
  DType target_dtype() const override { return DType::i32; }
  Shape target_shape() const override;  // () or (T)
  void check_input(const Shape& prediction_shape) const override;
  int64_t classes() const { return in_.back(); }

  double forward(const Tensor& prediction, const Tensor& target, int64_t global_batch,
                 LayerContext& ctx) override;
  Tensor backward(LayerContext& ctx) override;
  // Counts correct rows: samples for (classes), tokens for (T, classes).
  int64_t count_correct(const Tensor& prediction, const Tensor& target,
                        Backend& backend) const override;
  // After a vocab-parallel LM head (input_split, more than one rank): the vocab-parallel loss
  // on this rank's slice of the classes (layers/tensor_parallel/vocab_parallel_cross_entropy.h),
  // or a ShapeError when the classes do not divide; otherwise nullptr (this loss, whole).
  std::unique_ptr<Loss> shard_for(const TensorParallel& tp, ActivationSplit input) const override;

 private:
  void check_batch(const Tensor& prediction, const Tensor& target) const;
  // G (times T' for a sequence): the number of rows the loss is averaged over.
  double divisor(const Shape& prediction) const;
  Shape in_;
  int64_t global_batch_ = 0;  // G of the last forward
};

class MseLoss final : public Loss {
 public:
  static constexpr std::string_view kKind = "mse";

  explicit MseLoss(Shape in);

  std::string_view kind() const override { return kKind; }
  DType target_dtype() const override { return DType::f32; }
  Shape target_shape() const override { return in_; }
  void check_input(const Shape& prediction_shape) const override;

  double forward(const Tensor& prediction, const Tensor& target, int64_t global_batch,
                 LayerContext& ctx) override;
  Tensor backward(LayerContext& ctx) override;

 private:
  Shape in_;
  double divisor_ = 0;  // global_batch * numel(in) of the last forward
};

}  // namespace pt
