#include "engine/train/trainer.h"

#include <chrono>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/data/batching.h"
#include "engine/train/forward_pass.h"
#include "engine/train/step_epilogue.h"

namespace pt {

Tensor upload_rows(Backend& backend, const Tensor& host, int64_t first, int64_t count) {
  Tensor rows = host.slice_rows(first, count);
  Tensor out = backend.empty(rows.shape(), rows.dtype());
  if (out.bytes()) backend.copy_from_host(out.data(), rows.data(), out.bytes());
  return out;
}

Trainer::Trainer(Model& model, Backend& backend, const TrainerConfig& config)
    : model_(&model), backend_(&backend), config_(config) {
  params_ = std::make_unique<StageParameters>(model, 0, model.num_layers(), backend, config.seed);
  optimizer_ = std::make_unique<Optimizer>(config.optimizer, backend, params_->layout());
}

StepStats Trainer::train_step(const Tensor& inputs, const Tensor& targets) {
  const auto started = std::chrono::steady_clock::now();
  const int64_t batch = inputs.shape()[0];
  if (targets.shape()[0] != batch)
    throw UsageError(
        fmt::format("a batch has {} inputs but {} targets", batch, targets.shape()[0]));
  const auto sizes = split_sizes(batch, config_.microbatches);
  const int L = model_->num_layers();

  StepStats stats;
  stats.samples = batch;
  params_->start_gradients();
  int64_t first = 0;
  for (size_t m = 0; m < sizes.size(); ++m) {
    MicrobatchContexts ctx(*backend_, StepInfo{config_.seed, step_, static_cast<int>(m), true}, 0,
                           L,
                           /*with_loss=*/true);

    // ---- forward ----
    const Tensor x =
        forward_layers(*model_, 0, L, upload_rows(*backend_, inputs, first, sizes[m]), ctx);
    const Tensor target = upload_rows(*backend_, targets, first, sizes[m]);
    const auto [loss, correct] = model_->loss().forward_counting(x, target, batch, ctx.loss());
    stats.loss += loss;
    stats.correct = correct < 0 ? -1 : stats.correct + correct;

    // ---- backward: input gradient, then weight gradient, layer by layer ----
    Tensor dy = model_->loss().backward(ctx.loss());
    for (int l = L - 1; l >= 0; --l) {
      LayerContext& c = ctx.layer(l);
      Layer& layer = model_->layer(l);
      // Nobody needs dL/d(input) of a layer with no parameters before it.
      Tensor dx = model_->needs_input_gradient(l) ? layer.backward_input(dy, c) : Tensor();
      run_backward_weight(layer, dy, c, params_->take_unwritten(l));
      if (m + 1 == sizes.size()) layer.complete_gradients(*backend_);
      c.clear();
      dy = std::move(dx);
    }
    first += sizes[m];
  }
  params_->finish_gradients();

  stats.lr = config_.lr.at(step_);
  EpilogueConfig epilogue;
  epilogue.clip_norm = config_.clip_norm;
  epilogue.lr = stats.lr;
  const EpilogueResult end = finish_step(*model_, stage_states(), epilogue);
  stats.grad_norm = end.grad_norm;
  stats.skipped = end.skipped;
  stats.reserved_bytes = backend_->memory_stats().reserved_bytes;
  step_clock_.record(
      step_, batch,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  ++step_;
  return stats;
}

EvalStats Trainer::evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk) {
  const int64_t n = inputs.shape()[0];
  const int L = model_->num_layers();
  EvalStats out;
  out.samples = n;
  int64_t correct = 0;
  for (int64_t first = 0; first < n; first += chunk) {
    const int64_t count = std::min(chunk, n - first);
    MicrobatchContexts ctx(*backend_, StepInfo{config_.seed, step_, 0, false}, 0, L,
                           /*with_loss=*/true);
    const Tensor x =
        forward_layers(*model_, 0, L, upload_rows(*backend_, inputs, first, count), ctx);
    const Tensor target = upload_rows(*backend_, targets, first, count);
    const auto [loss, c] = model_->loss().forward_counting(x, target, n, ctx.loss());
    out.loss += loss;
    correct = c < 0 ? -1 : correct + c;
  }
  out.accuracy = correct < 0 ? -1.0 : static_cast<double>(correct) / static_cast<double>(n);
  return out;
}

}  // namespace pt
