#include "engine/update/full_shard_update.h"

#include <cmath>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/parallel/optimizer_shards.h"
#include "engine/train/tied_gradients.h"

namespace pt {

FullShardUpdate::FullShardUpdate(const UpdateContext& context, const FullShardConfig& shard)
    : context_(context) {
  const ParallelContext& par = context_.parallel;
  if (par.replicas < 2)
    throw UsageError(fmt::format(
        "--shard full needs --dp R >= 2: it splits parameters, gradients and optimizer state "
        "between data-parallel replicas and this run has {}; add --dp 2 (or more) or drop "
        "--shard full",
        par.replicas));
  shards_.resize(context_.stages.size());
  full_.resize(context_.stages.size());
  std::vector<std::map<int, UnitShards*>> by_device(static_cast<size_t>(context_.num_devices));
  for (size_t s = 0; s < context_.stages.size(); ++s)
    if (StageParameters* p = context_.stages[s]) {
      const int d = context_.stage_device[s];
      shards_[s] = std::make_unique<UnitShards>(*p, *context_.model, *par.shard_group(d),
                                                par.replicate_group(d), context_.trainer.optimizer,
                                                static_cast<int>(s), shard);
      by_device.at(static_cast<size_t>(d))[static_cast<int>(s)] = shards_[s].get();
    }
  for (auto& stages : by_device)
    residency_.push_back(
        stages.empty() ? nullptr : std::make_unique<FullShardResidency>(std::move(stages), shard));
}

void FullShardUpdate::begin_step(int64_t /*step*/) {
  take_full_optimizers();
  for (auto& s : shards_)
    if (s) {
      s->release_all();  // gathered for a reader between steps
      s->start_step();
    }
}

void FullShardUpdate::gather_whole_parameters() {
  for (auto& s : shards_)
    if (s) s->gather_all();
}

ParameterResidency* FullShardUpdate::residency(int device) {
  return residency_.at(static_cast<size_t>(device)).get();
}

// The step epilogue of engine/train/step_epilogue.cpp on the parts (the reduce-scatters ran
// during backward).
EpilogueResult FullShardUpdate::end_step(int64_t /*step*/, const EpilogueConfig& epilogue) {
  for (auto& r : residency_)
    if (r) r->publish();
  std::vector<UnitShards*> shards;
  std::vector<StageParameters*> held;
  for (size_t s = 0; s < shards_.size(); ++s)
    if (shards_[s]) {
      shards_[s]->end_schedule();
      shards.push_back(shards_[s].get());
      held.push_back(context_.stages[s]);
    }
  // Tied units are whole on every replica (all-reduced like --dp's): their copies add up here.
  sum_tied_gradients(*context_.model, held, epilogue.pipeline_group, epilogue.device_of_layer);
  EpilogueResult out;
  // Tensor parallelism: a split tensor's slices are summed over the tensor ranks, a replicated
  // one counted by rank 0 (global_grad_norm's rule).
  Communicator* tensor = epilogue.tensor_parallel_group;
  const bool counts_replicas = !tensor || tensor->rank() == 0;
  out.grad_norm = norm_of_squares(
      *context_.model, epilogue.pipeline_group,
      [&](std::vector<double>& squares, const std::vector<size_t>& first) {
        for (UnitShards* s : shards)
          s->add_squares(squares, first[static_cast<size_t>(s->params().first_layer())],
                         counts_replicas);
      },
      tensor);
  // Every stage, replica and process sees the same norm, so all skip together.
  out.skipped = !std::isfinite(out.grad_norm);
  if (out.skipped) {
    for (UnitShards* s : shards) s->release_all();
    return out;
  }
  const float factor = clip_factor(out.grad_norm, epilogue.clip_norm);
  epilogue.run_each_stage(shards.size(), [&](size_t i) { shards[i]->step(factor, epilogue.lr); });
  return out;
}

void FullShardUpdate::make_full_optimizers() {
  make_missing_optimizers(context_, full_);
  for (auto& s : shards_)
    if (s) s->materialize_all();
}

void FullShardUpdate::gather_full_optimizers() {
  make_missing_optimizers(context_, full_);
  for (size_t s = 0; s < shards_.size(); ++s)
    if (shards_[s]) {
      shards_[s]->gather_state(*full_[s]);
      shards_[s]->gather_all();
    }
}

void FullShardUpdate::take_full_optimizers() {
  for (size_t s = 0; s < shards_.size(); ++s)
    if (shards_[s] && full_[s]) {
      shards_[s]->take_state(*full_[s]);
      shards_[s]->take_params();
      full_[s].reset();
    }
}

std::vector<ReductionStats> FullShardUpdate::last_shard_stats() const {
  std::vector<ReductionStats> out;
  for (const auto& r : residency_)
    if (r) out.push_back(r->last_step_stats());
  return out;
}

size_t FullShardUpdate::optimizer_state_bytes() const {
  size_t bytes = 0;
  for (const auto& s : shards_)
    if (s) bytes += s->optimizer_state_bytes();
  return bytes;
}

HeldBytes FullShardUpdate::held_bytes(const std::vector<StageParameters*>& /*stages*/) const {
  HeldBytes held;
  for (const auto& s : shards_)
    if (s) {
      held.parameters += s->held_parameter_bytes();
      held.gradients += s->held_gradient_bytes();
      held.gathered_peak = std::max(held.gathered_peak, s->peak_gathered_bytes());
    }
  held.optimizer = optimizer_state_bytes();
  return held;
}

}  // namespace pt
