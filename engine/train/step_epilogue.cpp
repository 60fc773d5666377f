#include "engine/train/step_epilogue.h"

#include <cmath>
#include <stdexcept>

#include "engine/optim/optimizer.h"
#include "engine/train/tied_gradients.h"
#include "engine/train/training_engine.h"

namespace pt {

EpilogueResult finish_step(const Model& model, const std::vector<StageState>& stages,
                           const EpilogueConfig& config) {
  std::vector<StageParameters*> held;
  for (const StageState& s : stages) held.push_back(s.params);
  sum_tied_gradients(model, held, config.pipeline_group, config.device_of_layer);
  const std::vector<const StageParameters*> params(held.begin(), held.end());
  EpilogueResult out;
  out.grad_norm =
      global_grad_norm(params, model, config.pipeline_group, config.tensor_parallel_group);
  // Every stage, replica and process sees the same norm, so all skip together.
  out.skipped = !std::isfinite(out.grad_norm);
  if (out.skipped) return out;
  const float factor = clip_factor(out.grad_norm, config.clip_norm);
  const auto step = [&](size_t i) {
    StageParameters& p = *stages[i].params;
    Tensor g = p.grads_flat();
    if (factor != 1.f && g.numel()) p.backend().scale(factor, g.f32(), g.numel());
    stages[i].optimizer->step(p.params_flat(), g, config.lr);
  };
  config.run_each_stage(stages.size(), step);
  return out;
}

}  // namespace pt
