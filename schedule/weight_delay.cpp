#include "schedule/weight_delay.h"

#include <algorithm>

namespace pt::sched {

int least_weight_delay(const Schedule& s, int stage) {
  int delay = 0, updates = 0;
  for (const Action& a : s.actions.at(static_cast<size_t>(s.device_of(stage)))) {
    if (a.stage != stage) continue;
    if (a.type == ActionType::UPDATE) ++updates;
    if (is_compute(a.type)) delay = std::max(delay, s.step_of(a.microbatch) - updates);
  }
  return delay;
}

}  // namespace pt::sched
