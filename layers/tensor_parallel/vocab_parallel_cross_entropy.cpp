#include "layers/tensor_parallel/vocab_parallel_cross_entropy.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"
#include "layers/losses.h"
#include "layers/tensor_parallel/mappings.h"

namespace pt {

namespace {

constexpr std::string_view kWhat = "vocab-parallel softmax_cross_entropy";

}  // namespace

VocabParallelCrossEntropy::VocabParallelCrossEntropy(Shape in, const TensorParallel& tp)
    : in_(in), tp_(tp) {
  (void)SoftmaxCrossEntropy(in);  // the whole loss's checks of `in`
  range_ = vocab_range(in.back(), tp, kWhat);
  slice_ = in;
  slice_[slice_.rank() - 1] = range_.count;
}

std::string_view VocabParallelCrossEntropy::kind() const { return SoftmaxCrossEntropy::kKind; }

Shape VocabParallelCrossEntropy::target_shape() const {
  return in_.rank() == 1 ? Shape{} : Shape{in_[0]};
}

void VocabParallelCrossEntropy::check_input(const Shape& prediction_shape) const {
  if (prediction_shape != slice_)
    throw ShapeError(
        fmt::format("{}: expects rank {}'s slice {} of the predictions {} but the model outputs {}",
                    kWhat, tp_.rank, slice_.str(), in_.str(), prediction_shape.str()));
}

// Predictions (B, C/T) with targets (B); or (B, T', C/T) with targets (B, T') and
// 1 <= T' <= T, as SoftmaxCrossEntropy takes the whole rows.
int64_t VocabParallelCrossEntropy::check_batch(const Tensor& prediction,
                                               const Tensor& target) const {
  const Shape& p = prediction.shape();
  const Shape& t = target.shape();
  const bool sequence = in_.rank() == 2;
  const bool p_ok = sequence ? p.rank() == 3 && p[1] >= 1 && p[1] <= in_[0] && p[2] == range_.count
                             : p.rank() == 2 && p[1] == range_.count;
  if (!p_ok)
    throw ShapeError(fmt::format(
        "{}: expects rank {}'s slice of the predictions, {} (of {} whole{}), but got {}", kWhat,
        tp_.rank, sequence ? fmt::format("(B, T', {})", range_.count) : batched_str(slice_),
        batched_str(in_), sequence ? fmt::format(", 1 <= T' <= {}", in_[0]) : "", p.str()));
  const bool t_ok =
      sequence ? t.rank() == 2 && t[0] == p[0] && t[1] == p[1] : t.rank() == 1 && t[0] == p[0];
  if (!t_ok)
    throw ShapeError(fmt::format(
        "{}: predictions {} need targets {} but got {}", kWhat, p.str(),
        sequence ? fmt::format("({}, {})", p[0], p[1]) : fmt::format("({})", p[0]), t.str()));
  if (prediction.dtype() != DType::f32 || target.dtype() != DType::i32)
    throw ShapeError(
        fmt::format("{}: expects predictions of type {} and targets of type {} but "
                    "got {} and {}",
                    kWhat, dtype_name(DType::f32), dtype_name(DType::i32),
                    dtype_name(prediction.dtype()), dtype_name(target.dtype())));
  return target.numel();
}

// G rows of one class each, or G T' tokens: the mean is over the whole global batch.
double VocabParallelCrossEntropy::divisor(const Shape& prediction) const {
  const double rows_per_sample = in_.rank() == 1 ? 1.0 : static_cast<double>(prediction[1]);
  return static_cast<double>(global_batch_) * rows_per_sample;
}

Tensor VocabParallelCrossEntropy::gathered_partials(const Tensor& prediction, const Tensor& target,
                                                    int64_t rows, Backend& backend) const {
  Tensor mine = backend.empty(Shape{rows, kSoftmaxPartialFloats});
  backend.softmax_partials(prediction.f32(), target.i32(), mine.f32(), rows, range_);
  if (!tp_.enabled()) return mine;
  Tensor all = backend.empty(Shape{tp_.size, rows, kSoftmaxPartialFloats});
  tp_.group->all_gather(backend, mine.f32(), all.f32(), mine.numel(),
                        "vocab-parallel cross-entropy: softmax partials");
  return all;
}

double VocabParallelCrossEntropy::forward(const Tensor& prediction, const Tensor& target,
                                          int64_t global_batch, LayerContext& ctx) {
  return forward_counting(prediction, target, global_batch, ctx).loss;
}

Loss::Counted VocabParallelCrossEntropy::forward_counting(const Tensor& prediction,
                                                          const Tensor& target,
                                                          int64_t global_batch, LayerContext& ctx) {
  const int64_t rows = check_batch(prediction, target);
  if (global_batch <= 0 || prediction.shape()[0] > global_batch)
    throw UsageError(
        fmt::format("{}: global batch {} must be positive and at least the micro-batch size {}",
                    kWhat, global_batch, prediction.shape()[0]));
  Backend& be = ctx.backend();
  const Tensor partials = gathered_partials(prediction, target, rows, be);
  Tensor norm = ctx.alloc(Shape{rows, 2});  // (M, S) per row, for backward
  const SoftmaxTotals totals =
      be.softmax_combine(partials.f32(), target.i32(), norm.f32(), tp_.size, rows);
  global_batch_ = global_batch;
  if (ctx.info().training) {
    ctx.save(prediction);  // a reference: backward recomputes exp(z - M) from the logits
    ctx.save(target);
    ctx.save(norm);
  }
  return {totals.loss_sum / divisor(prediction.shape()), totals.correct};
}

Tensor VocabParallelCrossEntropy::backward(LayerContext& ctx) {
  if (ctx.saved_count() < 3)
    throw UsageError(fmt::format(
        "{}: backward found nothing saved; run forward (in training mode) on this context first",
        kWhat));
  const Tensor& logits = ctx.saved(0);
  const Tensor& labels = ctx.saved(1);
  const Tensor& norm = ctx.saved(2);
  Tensor dlogits = ctx.alloc(logits.shape());
  // dlogits = (exp(z - M) / S - onehot(labels)) / divisor on this rank's classes; T' from the
  // saved logits, so it is the T' of the forward this backward belongs to.
  ctx.backend().softmax_xent_backward_slice(logits.f32(), labels.i32(), norm.f32(), dlogits.f32(),
                                            labels.numel(), range_,
                                            static_cast<float>(1.0 / divisor(logits.shape())));
  return dlogits;
}

int64_t VocabParallelCrossEntropy::count_correct(const Tensor& prediction, const Tensor& target,
                                                 Backend& backend) const {
  const int64_t rows = check_batch(prediction, target);
  const Tensor partials = gathered_partials(prediction, target, rows, backend);
  return backend.softmax_combine(partials.f32(), target.i32(), nullptr, tp_.size, rows).correct;
}

}  // namespace pt
