#include "engine/trainer.h"

#include <cmath>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/data/batching.h"
#include "engine/tied_gradients.h"

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
  const int64_t batch = inputs.shape()[0];
  if (targets.shape()[0] != batch)
    throw UsageError(fmt::format("a batch has {} inputs but {} targets", batch, targets.shape()[0]));
  const auto sizes = split_sizes(batch, config_.microbatches);
  const int L = model_->num_layers();

  StepStats stats;
  stats.samples = batch;
  params_->zero_grads();
  int64_t first = 0;
  for (size_t m = 0; m < sizes.size(); ++m) {
    StepInfo info{config_.seed, step_, static_cast<int>(m), true};
    std::vector<LayerContext> ctx;
    ctx.reserve(static_cast<size_t>(L) + 1);
    SkipBoard skips;
    for (int l = 0; l <= L; ++l) {
      ctx.emplace_back(*backend_, info, static_cast<uint64_t>(l));
      ctx.back().set_skips(&skips);
    }

    // ---- forward ----
    Tensor x = upload_rows(*backend_, inputs, first, sizes[m]);
    const Tensor target = upload_rows(*backend_, targets, first, sizes[m]);
    for (int l = 0; l < L; ++l) x = model_->layer(l).forward(x, ctx[static_cast<size_t>(l)]);
    LayerContext& loss_ctx = ctx[static_cast<size_t>(L)];
    stats.loss += model_->loss().forward(x, target, batch, loss_ctx);
    const int64_t correct = model_->loss().count_correct(x, target, *backend_);
    stats.correct = correct < 0 ? -1 : stats.correct + correct;

    // ---- backward: input gradient, then weight gradient, layer by layer ----
    Tensor dy = model_->loss().backward(loss_ctx);
    for (int l = L - 1; l >= 0; --l) {
      LayerContext& c = ctx[static_cast<size_t>(l)];
      Layer& layer = model_->layer(l);
      Tensor dx = l > 0 ? layer.backward_input(dy, c) : Tensor();  // no one needs dL/d(input)
      layer.backward_weight(dy, c);
      c.clear();
      dy = std::move(dx);
    }
    first += sizes[m];
  }

  // One pass over all gradients: the norm for clipping, and the inf/NaN check.
  Tensor grads = params_->grads_flat();
  sum_tied_gradients(*model_, {params_.get()});
  stats.grad_norm = global_grad_norm({params_.get()});
  stats.lr = config_.lr.at(step_);
  if (!std::isfinite(stats.grad_norm)) {
    stats.skipped = true;  // every parameter stays as it was
  } else {
    const float factor = clip_factor(stats.grad_norm, config_.clip_norm);
    if (factor != 1.f) backend_->scale(factor, grads.f32(), grads.numel());
    optimizer_->step(params_->params_flat(), grads, stats.lr);
  }
  ++step_;
  return stats;
}

EvalStats Trainer::evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk) {
  const int64_t n = inputs.shape()[0];
  const int L = model_->num_layers();
  EvalStats out;
  out.samples = n;
  int64_t correct = 0;
  StepInfo info{config_.seed, step_, 0, false};
  for (int64_t first = 0; first < n; first += chunk) {
    const int64_t count = std::min(chunk, n - first);
    Tensor x = upload_rows(*backend_, inputs, first, count);
    const Tensor target = upload_rows(*backend_, targets, first, count);
    SkipBoard skips;
    for (int l = 0; l < L; ++l) {
      LayerContext ctx(*backend_, info, static_cast<uint64_t>(l));
      ctx.set_skips(&skips);
      x = model_->layer(l).forward(x, ctx);
    }
    LayerContext loss_ctx(*backend_, info, static_cast<uint64_t>(L));
    out.loss += model_->loss().forward(x, target, n, loss_ctx);
    const int64_t c = model_->loss().count_correct(x, target, *backend_);
    correct = c < 0 ? -1 : correct + c;
  }
  out.accuracy = correct < 0 ? -1.0 : static_cast<double>(correct) / static_cast<double>(n);
  return out;
}

}  // namespace pt
