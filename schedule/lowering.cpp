#include "schedule/lowering.h"

#include <stdexcept>
#include <vector>

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

Schedule add_grad_reduction(const Schedule& schedule) {
  Schedule out = schedule;
  for (size_t d = 0; d < schedule.actions.size(); ++d) {
    const auto& list = schedule.actions[d];
    std::vector<int> last_wgrad(static_cast<size_t>(schedule.num_stages), -1);  // index in list
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (a.type == ActionType::REDUCE_GRAD)
        throw std::invalid_argument("add_grad_reduction: the schedule already has " + a.str() +
                                    " (device " + std::to_string(d) + ")");
      if (a.type == ActionType::B || a.type == ActionType::W)
        last_wgrad.at(static_cast<size_t>(a.stage)) = static_cast<int>(i);
    }
    auto& lowered = out.actions[d];
    lowered.clear();
    for (size_t i = 0; i < list.size(); ++i) {
      lowered.push_back(list[i]);
      for (int s = 0; s < schedule.num_stages; ++s)
        if (last_wgrad[static_cast<size_t>(s)] == static_cast<int>(i))
          lowered.push_back({s, ActionType::REDUCE_GRAD, -1});
    }
  }
  return out;
}

}  // namespace pt::sched
