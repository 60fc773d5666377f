#include "layers/losses.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"
#include "layers/tensor_parallel/group.h"
#include "layers/tensor_parallel/vocab_parallel_cross_entropy.h"

namespace pt {

namespace {

// The prediction/target tensors of one micro-batch: (B, ...per_sample) of the given dtype.
int64_t check_loss_tensor(std::string_view kind, std::string_view what, const Tensor& t,
                          const Shape& per_sample, DType dtype) {
  if (t.shape().rank() != per_sample.rank() + 1 || t.shape().drop_first() != per_sample)
    throw ShapeError(fmt::format("{}: expects {} {} but got {}", kind, what,
                                 batched_str(per_sample), t.shape().str()));
  if (t.dtype() != dtype)
    throw ShapeError(fmt::format("{}: expects {} of type {} but got {}", kind, what,
                                 dtype_name(dtype), dtype_name(t.dtype())));
  return t.shape()[0];
}

void check_global_batch(std::string_view kind, int64_t batch, int64_t global_batch) {
  if (global_batch <= 0 || batch > global_batch)
    throw UsageError(
        fmt::format("{}: global batch {} must be positive and at least the "
                    "micro-batch size {}",
                    kind, global_batch, batch));
}

const Tensor& saved_or_throw(std::string_view kind, const LayerContext& ctx, size_t i) {
  if (i >= ctx.saved_count())
    throw UsageError(
        fmt::format("{}: backward found nothing saved; run forward (in training "
                    "mode) on this context first",
                    kind));
  return ctx.saved(i);
}

}  // namespace

// ---- softmax cross-entropy -----------------------------------------------------------------
SoftmaxCrossEntropy::SoftmaxCrossEntropy(Shape in) : in_(in) {
  if (in.rank() != 1 && in.rank() != 2)
    throw ShapeError(fmt::format("{}: expects predictions (classes) or (T, classes) but got {}",
                                 kKind, in.str()));
  require_positive(kKind, "classes", in.back());
  if (in.rank() == 2) require_positive(kKind, "T", in[0]);
}

Shape SoftmaxCrossEntropy::target_shape() const {
  return in_.rank() == 1 ? Shape{} : Shape{in_[0]};
}

void SoftmaxCrossEntropy::check_input(const Shape& prediction_shape) const {
  if (prediction_shape != in_)
    throw ShapeError(fmt::format("{}: expects predictions {} but the model outputs {}", kKind,
                                 in_.str(), prediction_shape.str()));
}

// Predictions (B, classes) with targets (B); or, for a sequence, (B, T', classes) with targets
// (B, T') and 1 <= T' <= T (a shorter sequence than built for, like the sequence layers).
void SoftmaxCrossEntropy::check_batch(const Tensor& prediction, const Tensor& target) const {
  if (in_.rank() == 1) {
    const int64_t B = check_loss_tensor(kKind, "predictions", prediction, in_, DType::f32);
    const int64_t Bt = check_loss_tensor(kKind, "targets", target, target_shape(), DType::i32);
    if (B != Bt) throw ShapeError(fmt::format("{}: {} predictions but {} targets", kKind, B, Bt));
    return;
  }
  const Shape& p = prediction.shape();
  const Shape& t = target.shape();
  const int64_t T = in_[0];
  if (p.rank() != 3 || p[2] != classes() || p[1] < 1 || p[1] > T)
    throw ShapeError(
        fmt::format("{}: expects predictions (B, T', {}) with 1 <= T' <= {} (the "
                    "sequence length it was built for) but got {}",
                    kKind, classes(), T, p.str()));
  if (t.rank() != 2 || t[0] != p[0] || t[1] != p[1])
    throw ShapeError(fmt::format("{}: predictions {} need targets ({}, {}) but got {}", kKind,
                                 p.str(), p[0], p[1], t.str()));
  if (prediction.dtype() != DType::f32)
    throw ShapeError(fmt::format("{}: expects predictions of type {} but got {}", kKind,
                                 dtype_name(DType::f32), dtype_name(prediction.dtype())));
  if (target.dtype() != DType::i32)
    throw ShapeError(fmt::format("{}: expects targets of type {} but got {}", kKind,
                                 dtype_name(DType::i32), dtype_name(target.dtype())));
}

// The mean is over the tokens of the global batch: G for (classes), G * T' for a sequence of
// length T' (the length of the call, which may be shorter than the T built for).
double SoftmaxCrossEntropy::divisor(const Shape& prediction) const {
  const double rows_per_sample = in_.rank() == 1 ? 1.0 : static_cast<double>(prediction[1]);
  return static_cast<double>(global_batch_) * rows_per_sample;
}

double SoftmaxCrossEntropy::forward(const Tensor& prediction, const Tensor& target,
                                    int64_t global_batch, LayerContext& ctx) {
  check_batch(prediction, target);
  check_global_batch(kKind, prediction.shape()[0], global_batch);
  const int64_t rows = prediction.numel() / classes();
  Tensor probs = ctx.alloc(prediction.shape());
  const double sum = ctx.backend().softmax_xent_forward(prediction.f32(), target.i32(), probs.f32(),
                                                        rows, classes());
  global_batch_ = global_batch;
  if (ctx.info().training) {
    ctx.save(probs);
    ctx.save(target);
  }
  return sum / divisor(prediction.shape());
}

Tensor SoftmaxCrossEntropy::backward(LayerContext& ctx) {
  const Tensor& probs = saved_or_throw(kKind, ctx, 0);
  const Tensor& labels = ctx.saved(1);
  // dlogits = (probs - onehot(labels)) / divisor, written over the saved probabilities: nothing
  // reads them after this backward, and a (tokens x vocabulary) buffer is the largest activation
  // of a language model (GPT-2 124M, 16 x 1024 tokens: 3.3 GB in fp32). T' from the saved
  // probs, so it is the T' of the forward this backward belongs to.
  const int64_t rows = probs.numel() / classes();
  const float scale = static_cast<float>(1.0 / divisor(probs.shape()));
  Tensor dlogits = probs;  // the same storage
  ctx.backend().softmax_xent_backward(probs.f32(), labels.i32(), dlogits.f32(), rows, classes(),
                                      scale);
  return dlogits;
}

int64_t SoftmaxCrossEntropy::count_correct(const Tensor& prediction, const Tensor& target,
                                           Backend& backend) const {
  check_batch(prediction, target);
  return backend.count_correct(prediction.f32(), target.i32(), prediction.numel() / classes(),
                               classes());
}

std::unique_ptr<Loss> SoftmaxCrossEntropy::shard_for(const TensorParallel& tp,
                                                     ActivationSplit input) const {
  if (input.sequence) return Loss::shard_for(tp, input);  // refused: gather the sequence first
  if (!input.features || !tp.enabled()) return nullptr;
  return std::make_unique<VocabParallelCrossEntropy>(in_, tp);
}

// ---- mean squared error --------------------------------------------------------------------
MseLoss::MseLoss(Shape in) : in_(in) { require_positive(kKind, "prediction size", in.numel()); }

void MseLoss::check_input(const Shape& prediction_shape) const {
  if (prediction_shape != in_)
    throw ShapeError(fmt::format("{}: expects predictions {} but the model outputs {}", kKind,
                                 in_.str(), prediction_shape.str()));
}

double MseLoss::forward(const Tensor& prediction, const Tensor& target, int64_t global_batch,
                        LayerContext& ctx) {
  const int64_t B = check_loss_tensor(kKind, "predictions", prediction, in_, DType::f32);
  const int64_t Bt = check_loss_tensor(kKind, "targets", target, in_, DType::f32);
  if (B != Bt) throw ShapeError(fmt::format("{}: {} predictions but {} targets", kKind, B, Bt));
  check_global_batch(kKind, B, global_batch);
  const double sum = ctx.backend().mse_forward(prediction.f32(), target.f32(), prediction.numel());
  divisor_ = static_cast<double>(global_batch) * static_cast<double>(in_.numel());
  if (ctx.info().training) {
    ctx.save(prediction);
    ctx.save(target);
  }
  return sum / divisor_;
}

Tensor MseLoss::backward(LayerContext& ctx) {
  const Tensor& pred = saved_or_throw(kKind, ctx, 0);
  const Tensor& target = ctx.saved(1);
  Tensor dpred = ctx.alloc(pred.shape());
  // dpred = 2 (pred - target) / divisor
  ctx.backend().mse_backward(pred.f32(), target.f32(), dpred.f32(), pred.numel(),
                             static_cast<float>(1.0 / divisor_));
  return dpred;
}

}  // namespace pt
