#include "engine/step_epilogue.h"

#include <cmath>
#include <stdexcept>

#include "engine/optimizer.h"
#include "engine/parallel/optimizer_shards.h"
#include "engine/tied_gradients.h"
#include "engine/training_engine.h"

namespace pt {

EpilogueResult finish_step(const Model& model, const std::vector<StageState>& stages,
                           const EpilogueConfig& config) {
  const bool sharded = !config.shards.empty();
  if (sharded && config.shards.size() != stages.size())
    throw std::logic_error("finish_step: one shard per stage, or none");
  // The owners' sums first: the tied copies and the norm below need them.
  for (StageShard* s : config.shards) s->reduce_gradients();
  std::vector<StageParameters*> held;
  for (const StageState& s : stages) held.push_back(s.params);
  sum_tied_gradients(model, held, config.pipeline_group, config.device_of_layer);
  const std::vector<const StageParameters*> params(held.begin(), held.end());
  EpilogueResult out;
  out.grad_norm = sharded ? sharded_grad_norm(config.shards, model, config.pipeline_group)
                          : global_grad_norm(params, model, config.pipeline_group);
  // Every stage, replica and process sees the same norm, so all skip together.
  out.skipped = !std::isfinite(out.grad_norm);
  if (out.skipped) return out;
  const float factor = clip_factor(out.grad_norm, config.clip_norm);
  const auto step = [&](size_t i) {
    if (sharded) return config.shards[i]->step(factor, config.lr);
    StageParameters& p = *stages[i].params;
    Tensor g = p.grads_flat();
    if (factor != 1.f && g.numel()) p.backend().scale(factor, g.f32(), g.numel());
    stages[i].optimizer->step(p.params_flat(), g, config.lr);
  };
  if (config.for_each_stage) {
    config.for_each_stage(step);
  } else {
    for (size_t i = 0; i < stages.size(); ++i) step(i);
  }
  for (StageShard* s : config.shards) s->gather_parameters();
  return out;
}

}  // namespace pt
