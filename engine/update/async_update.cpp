#include "engine/update/async_update.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/parallel/all_reduce_gradients.h"
#include "engine/train/tied_gradients.h"
#include "engine/train/training_engine.h"
#include "engine/update/async_update_limits.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/validate.h"
#include "schedule/weight_delay.h"

namespace pt {

namespace {

size_t at(int i) { return static_cast<size_t>(i); }

// --update async with --dp R: UPDATE(k) of a stage sums the stage's gradient over the replicas
// in one all-reduce on the device's data-parallel group (the communicator and element-wise sum
// the synchronous GradientReducer uses; one call per stage, no buckets and no overlap with
// backward, since UPDATE comes after the stage's last backward of the step anyway).
void all_reduce_stage_gradients(StageParameters& params, Communicator& group, int stage,
                                int64_t step) {
  Tensor grads = params.grads_flat();
  const int64_t n = grads.numel();
  if (n == 0) return;
  Backend& b = params.backend();
  const std::string what =
      fmt::format("the gradient all-reduce of stage {} at the UPDATE of step {}", stage, step);
  b.synchronize();  // the backward work that produced the gradient
  std::vector<float> staging;
  all_reduce_gradients(b, group, grads.f32(), n, staging, what);
  b.synchronize();  // the copy back, when staged through the host
}

}  // namespace

AsyncUpdate::AsyncUpdate(const UpdateContext& context, int window, AsyncDelay delay, int64_t step)
    : context_(context), window_(window) {
  check();  // before the shards' collectives
  delays_ = microbatch_delays(delay);
  make_missing_optimizers(context_, optimizers_);
  versions_.resize(context_.stages.size());
  for (size_t s = 0; s < context_.stages.size(); ++s)
    if (StageParameters* p = context_.stages[s])
      versions_[s] = std::make_unique<WeightVersions>(*context_.model, *p, step,
                                                      stage_delay(static_cast<int>(s)) > 0);
}

void AsyncUpdate::check() const {
  const int S = static_cast<int>(context_.stages.size()), M = context_.trainer.microbatches;
  if (window_ < 1)
    throw UsageError(
        fmt::format("--async-window {} must be >= 1 (steps per schedule run)", window_));
  if (S < 2)
    throw UsageError(
        "--update async needs --stages >= 2: on one stage there is no pipeline to keep full; use "
        "--update sync");
  if (context_.num_devices != S)
    throw UsageError("--update async runs 1F1B with one stage per device: use --schedule 1f1b");
  if (M < S - 1)
    throw UsageError(fmt::format(
        "--update async with --stages {} needs --microbatches >= {} (stages - 1) so that at most "
        "two weight versions are live; raise --microbatches",
        S, S - 1));
  refuse_unsupported_with_async(context_.trainer.clip_norm, false);
  if (context_.parallel.shard_optimizer)
    throw UsageError(
        "--shard-optimizer with --update async: each stage steps its whole optimizer at its own "
        "UPDATE; drop --shard-optimizer or use --update sync");
  if (context_.parallel.uses_parameter_server())
    throw UsageError(
        "--ps with --update async: the parameter servers apply the updates; drop --ps or use "
        "--update sync");
  for (const ParameterTie& tie : context_.model->ties())
    for (const ParamRef& m : tie.members)
      if (context_.stage_of_layer(m.layer) != context_.stage_of_layer(tie.members[0].layer))
        throw UsageError(fmt::format(
            "--update async: layers {} and {} share a tied parameter but are on stages {} and "
            "{}, which update on their own: untie them (pipetrain-gpt: --untied) or use --update "
            "sync",
            tie.members[0].layer, m.layer, context_.stage_of_layer(tie.members[0].layer),
            context_.stage_of_layer(m.layer)));
}

std::vector<std::vector<int>> AsyncUpdate::microbatch_delays(AsyncDelay delay) const {
  const int M = context_.trainer.microbatches;
  const sched::Schedule window = sched::one_f_one_b_async(context_.num_devices, M, /*K=*/2);
  std::vector<std::vector<int>> delays;
  int oldest = 0;
  for (int s = 0; s < window.num_stages; ++s) {
    delays.push_back(sched::least_microbatch_delays(window, s));
    if (delay == AsyncDelay::per_stage)  // every micro-batch as old as the stage's oldest
      delays.back().assign(static_cast<size_t>(M), sched::least_weight_delay(window, s));
    for (int d : delays.back()) oldest = std::max(oldest, d);
  }
  if (delay == AsyncDelay::uniform)  // every stage as old as the oldest (PipeDream-2BW's one step)
    for (auto& d : delays) d.assign(static_cast<size_t>(M), oldest);
  return delays;
}

int AsyncUpdate::stage_delay(int stage) const {
  const auto& d = delays_.at(static_cast<size_t>(stage));
  return *std::max_element(d.begin(), d.end());
}

EpilogueResult AsyncUpdate::end_step(int64_t /*step*/, const EpilogueConfig& /*epilogue*/) {
  throw std::logic_error("end_step: an asynchronous update ends no step with a flush");
}

const sched::Schedule& AsyncUpdate::window_schedule(int steps) {
  auto it = window_schedules_.find(steps);
  if (it != window_schedules_.end()) return it->second;
  sched::Schedule s = sched::add_communication(
      sched::one_f_one_b_async(context_.num_devices, context_.trainer.microbatches, steps));
  sched::require_valid(s);
  return window_schedules_.emplace(steps, std::move(s)).first->second;
}

int64_t AsyncUpdate::before_compute(const sched::Action& a, int64_t step) {
  // Micro-batch m of step t (m: its index within the step) computes with W(t - delay); W(-1) =
  // W(0). Its backward binds what its forward did: the delays are fixed per (stage, m).
  const int M = context_.trainer.microbatches;
  const int64_t version = step - delays_.at(at(a.stage)).at(at(a.microbatch % M));
  versions_[at(a.stage)]->bind(version);
  return version;
}

double AsyncUpdate::update(int s, int64_t step) {
  StageParameters& params = *context_.stages[at(s)];
  params.finish_gradients();  // a layer without a weight gradient this step: zeros
  // Reduced before the ties are summed, the order of synchronous mode (reducer, then epilogue).
  if (context_.parallel.replicas > 1)
    all_reduce_stage_gradients(
        params, *context_.parallel.data_parallel_group(context_.stage_device[at(s)]), s, step);
  sum_tied_gradients(*context_.model, {&params});  // ties within the stage only (check)
  const double norm = global_grad_norm(std::vector<const StageParameters*>{&params});
  if (!std::isfinite(norm))
    throw std::runtime_error(fmt::format(
        "step {}: the gradients of stage {} (layers {}..{}) are not finite (norm {}); with "
        "--update async each stage updates on its own, so the run stops instead of skipping "
        "the step everywhere",
        step, s, params.first_layer(), params.last_layer() - 1, norm));
  versions_[at(s)]->update(*optimizers_[at(s)], context_.trainer.lr.at(step));
  return norm;
}

void AsyncUpdate::end_window() {
  for (auto& v : versions_)
    if (v) v->bind(v->latest());  // evaluation sees the latest
}

void AsyncUpdate::set_step(int64_t step) {
  for (auto& v : versions_)
    if (v) v->set_latest(step);
}

size_t AsyncUpdate::weight_stash_bytes() const {
  size_t n = 0;
  for (const auto& v : versions_)
    if (v) n += v->extra_bytes();
  return n;
}

}  // namespace pt
