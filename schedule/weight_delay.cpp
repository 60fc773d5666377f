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

std::vector<int> least_microbatch_delays(const Schedule& s, int stage) {
  const int per_step = s.microbatches_per_step();
  std::vector<int> delays(static_cast<size_t>(per_step), 0);
  int updates = 0;
  for (const Action& a : s.actions.at(static_cast<size_t>(s.device_of(stage)))) {
    if (a.stage != stage) continue;
    if (a.type == ActionType::UPDATE) ++updates;
    if (a.type != ActionType::F) continue;
    int& d = delays[static_cast<size_t>(a.microbatch % per_step)];
    d = std::max(d, s.step_of(a.microbatch) - updates);
  }
  return delays;
}

}  // namespace pt::sched
