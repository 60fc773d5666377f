#include "engine/update/sharded_update.h"

#include <cmath>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/train/tied_gradients.h"

namespace pt {

ShardedUpdate::ShardedUpdate(const UpdateContext& context) : context_(context) {
  const ParallelContext& par = context_.parallel;
  if (par.replicas < 2)
    throw UsageError(fmt::format(
        "--shard-optimizer needs --dp R >= 2: it splits the optimizer state between data-parallel "
        "replicas and this run has {}; add --dp 2 (or more) or drop --shard-optimizer",
        par.replicas));
  shards_.resize(context_.stages.size());
  full_.resize(context_.stages.size());
  for (size_t s = 0; s < context_.stages.size(); ++s)
    if (StageParameters* p = context_.stages[s])
      shards_[s] = std::make_unique<StageShard>(*p, *context_.model,
                                                *par.data_parallel_group(context_.stage_device[s]),
                                                context_.trainer.optimizer, static_cast<int>(s));
}

// The step epilogue of engine/train/step_epilogue.cpp with the shards' collectives around it.
EpilogueResult ShardedUpdate::end_step(int64_t /*step*/, const EpilogueConfig& epilogue) {
  std::vector<StageShard*> shards;
  std::vector<StageParameters*> held;
  for (size_t s = 0; s < shards_.size(); ++s)
    if (shards_[s]) {
      shards.push_back(shards_[s].get());
      held.push_back(context_.stages[s]);
    }
  // The owners' sums first: the tied copies and the norm below need them.
  for (StageShard* s : shards) s->reduce_gradients();
  sum_tied_gradients(*context_.model, held, epilogue.pipeline_group, epilogue.device_of_layer);
  EpilogueResult out;
  out.grad_norm = sharded_grad_norm(shards, *context_.model, epilogue.pipeline_group);
  // Every stage, replica and process sees the same norm, so all skip together.
  out.skipped = !std::isfinite(out.grad_norm);
  if (out.skipped) return out;
  const float factor = clip_factor(out.grad_norm, epilogue.clip_norm);
  epilogue.run_each_stage(shards.size(), [&](size_t i) { shards[i]->step(factor, epilogue.lr); });
  for (StageShard* s : shards) s->gather_parameters();
  return out;
}

void ShardedUpdate::gather_full_optimizers() {
  make_full_optimizers();
  for (size_t s = 0; s < shards_.size(); ++s)
    if (shards_[s]) shards_[s]->gather_state(*full_[s]);
}

void ShardedUpdate::take_full_optimizers() {
  for (size_t s = 0; s < shards_.size(); ++s)
    if (shards_[s] && full_[s]) {
      shards_[s]->take_state(*full_[s]);
      full_[s].reset();
    }
}

size_t ShardedUpdate::optimizer_state_bytes() const {
  size_t bytes = 0;
  for (const auto& s : shards_)
    if (s) bytes += s->state_bytes();
  return bytes;
}

}  // namespace pt
