#include "engine/update/update_strategy.h"

#include <stdexcept>

namespace pt {

int UpdateContext::stage_of_layer(int layer) const {
  for (size_t s = 0; s + 1 < stage_first_layer.size(); ++s)
    if (layer < stage_first_layer[s + 1]) return static_cast<int>(s);
  throw std::logic_error("UpdateContext::stage_of_layer: no stage holds that layer");
}

const sched::Schedule& UpdateStrategy::window_schedule(int /*steps*/) {
  throw std::logic_error("window_schedule: a synchronous update runs one step per schedule");
}

int64_t UpdateStrategy::before_compute(const sched::Action& /*action*/, int64_t /*step*/) {
  throw std::logic_error("before_compute: a synchronous update binds no weight versions");
}

double UpdateStrategy::update(int /*stage*/, int64_t /*step*/) {
  throw std::logic_error("update: a synchronous update has no UPDATE action");
}

HeldBytes UpdateStrategy::held_bytes(const std::vector<StageParameters*>& stages) const {
  HeldBytes held;
  for (const StageParameters* p : stages)
    if (p) {
      held.parameters += p->layout().total_bytes() + p->stash_bytes();
      held.gradients += p->layout().total_bytes();
    }
  held.optimizer = optimizer_state_bytes();
  return held;
}

void make_missing_optimizers(const UpdateContext& context,
                             std::vector<std::unique_ptr<Optimizer>>& optimizers) {
  optimizers.resize(context.stages.size());
  for (size_t s = 0; s < context.stages.size(); ++s)
    if (StageParameters* p = context.stages[s]; p && !optimizers[s])
      optimizers[s] =
          std::make_unique<Optimizer>(context.trainer.optimizer, p->backend(), p->layout());
}

size_t held_optimizer_bytes(const std::vector<std::unique_ptr<Optimizer>>& optimizers) {
  size_t bytes = 0;
  for (const auto& o : optimizers)
    if (o)
      for (const OptimizerSlot& slot : o->slots()) bytes += slot.state.bytes();
  return bytes;
}

}  // namespace pt
