#pragma once
// SoftmaxCrossEntropy on logits split by classes across the T ranks of a tensor-parallel group
// (Megatron-LM's vocab_parallel_cross_entropy), the loss after a vocab-parallel LM head: rank t
// holds the classes [t C/T, (t+1) C/T) of every row, (B, C/T) or (B, T', C/T), and every rank
// the same labels (B) or (B, T'). The logits are never gathered; per row, each rank reduces its
// slice to four numbers (Backend::softmax_partials: local max m_t, s_t = sum exp(z - m_t),
// the label's logit if the label is its, its first arg-max), one all-gather brings every rank
// all T of them, and each combines them alike (Backend::softmax_combine):
//   M = max_t m_t,   S = sum_t s_t exp(m_t - M),   loss_row = log S - (z_label - M).
// So every rank returns the same loss (the same bits: the same gathered bytes through the same
// loop), SoftmaxCrossEntropy's on the whole logits up to rounding: S is summed slice by slice,
// in another order than one sum over the row. Backward needs no collective:
//   dlogits_t = (exp(z_t - M) / S - onehot_t(label)) / divisor,
// from the logits saved by reference and (M, S) per row; divisor as SoftmaxCrossEntropy's
// (G, times T' for a sequence). count_correct: the first arg-max over the whole row (ties go
// to the lowest class, as SoftmaxCrossEntropy's), from the same gathered partials; a training
// step asks for both at once (forward_counting: one all-gather a micro-batch).
//
// kind() is SoftmaxCrossEntropy's: the same function of the same whole logits, computed in
// slices; what reads a loss's kind (the model summary, reports) sees the model's loss.
// forward and count_correct are collectives: every rank of the group calls them, in the same
// order, with the same labels.
#include <cstdint>
#include <string_view>

#include "layers/layer.h"
#include "layers/tensor_parallel/group.h"

namespace pt {

class VocabParallelCrossEntropy final : public Loss {
 public:
  // in: the WHOLE per-sample prediction shape, (classes) or (T, classes); classes must divide
  // by tp.size (ShapeError naming both otherwise).
  VocabParallelCrossEntropy(Shape in, const TensorParallel& tp);

  std::string_view kind() const override;  // "softmax_cross_entropy"
  DType target_dtype() const override { return DType::i32; }
  Shape target_shape() const override;  // () or (T)
  // The prediction reaching this rank: its slice, (classes / T) or (T, classes / T).
  void check_input(const Shape& prediction_shape) const override;
  int64_t classes() const { return range_.total; }  // of the whole row
  VocabRange columns() const { return range_; }     // this rank's classes

  double forward(const Tensor& prediction, const Tensor& target, int64_t global_batch,
                 LayerContext& ctx) override;
  Tensor backward(LayerContext& ctx) override;
  int64_t count_correct(const Tensor& prediction, const Tensor& target,
                        Backend& backend) const override;
  // Both from one all-gather of the partials.
  Counted forward_counting(const Tensor& prediction, const Tensor& target, int64_t global_batch,
                           LayerContext& ctx) override;

 private:
  // Checks a micro-batch's slice of the logits and its labels; returns the rows (B or B T').
  int64_t check_batch(const Tensor& prediction, const Tensor& target) const;
  double divisor(const Shape& prediction) const;
  // partials(rows, 4) of this rank, then every rank's (T, rows, 4), in `backend`'s memory.
  Tensor gathered_partials(const Tensor& prediction, const Tensor& target, int64_t rows,
                           Backend& backend) const;

  Shape in_;     // whole, per sample
  Shape slice_;  // this rank's, per sample
  TensorParallel tp_;
  VocabRange range_;
  int64_t global_batch_ = 0;  // G of the last forward
};

}  // namespace pt
