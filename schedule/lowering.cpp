#include "schedule/lowering.h"

#include <stdexcept>

namespace pt::sched {

Schedule add_communication(const Schedule& schedule) {
  const int last = schedule.num_stages - 1;
  Schedule out = schedule;
  for (size_t d = 0; d < schedule.actions.size(); ++d) {
    auto& list = out.actions[d];
    list.clear();
    for (const Action& a : schedule.actions[d]) {
      if (is_communication(a.type))
        throw std::invalid_argument("add_communication: the schedule already has " + a.str() +
                                    " (device " + std::to_string(d) + "); lower only once");
      const int s = a.stage, m = a.microbatch;
      const bool prev_remote = s > 0 && schedule.device_of(s - 1) != schedule.device_of(s);
      const bool next_remote = s < last && schedule.device_of(s + 1) != schedule.device_of(s);
      const bool input_grad = a.type == ActionType::B || a.type == ActionType::I;
      if (a.type == ActionType::F && prev_remote) list.push_back({s, ActionType::RECV_F, m});
      if (input_grad && next_remote) list.push_back({s, ActionType::RECV_B, m});
      list.push_back(a);
      if (a.type == ActionType::F && next_remote) list.push_back({s, ActionType::SEND_F, m});
      if (input_grad && prev_remote) list.push_back({s, ActionType::SEND_B, m});
    }
  }
  return out;
}

Schedule add_step(const Schedule& schedule) {
  Schedule out = schedule;
  for (size_t d = 0; d < schedule.actions.size(); ++d)
    for (const Action& a : schedule.actions[d])
      if (a.type == ActionType::STEP)
        throw std::invalid_argument("add_step: the schedule already has " + a.str() + " (device " +
                                    std::to_string(d) + ")");
  for (int s = 0; s < schedule.num_stages; ++s)
    out.actions.at(static_cast<size_t>(schedule.device_of(s))).push_back({s, ActionType::STEP, -1});
  return out;
}

}  // namespace pt::sched
