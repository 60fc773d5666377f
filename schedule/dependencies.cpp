#include "schedule/dependencies.h"

namespace pt::sched {

namespace {

std::tuple<int, int, int> key_of(const Action& a) {
  return {a.stage, static_cast<int>(a.type), a.microbatch};
}

bool same_device(const Schedule& schedule, int stage_a, int stage_b) {
  return schedule.device_of(stage_a) == schedule.device_of(stage_b);
}

}  // namespace

Form infer_form(const Schedule& schedule) {
  for (const auto& list : schedule.actions)
    for (const Action& a : list)
      if (is_communication(a.type)) return Form::Lowered;
  return Form::ComputeOnly;
}

ActionIndex::ActionIndex(const Schedule& schedule) {
  for (size_t d = 0; d < schedule.actions.size(); ++d) {
    const auto& list = schedule.actions[d];
    for (size_t i = 0; i < list.size(); ++i)
      slots_.try_emplace(key_of(list[i]), Slot{static_cast<int>(d), static_cast<int>(i)});
  }
}

std::optional<Slot> ActionIndex::find(const Action& action) const {
  const auto it = slots_.find(key_of(action));
  if (it == slots_.end()) return std::nullopt;
  return it->second;
}

Action backward_of(int stage, int microbatch, const ActionIndex& index) {
  const Action split{stage, ActionType::I, microbatch};
  if (index.find(split)) return split;
  return {stage, ActionType::B, microbatch};
}

Action weight_grad_of(int stage, int microbatch, const ActionIndex& index) {
  const Action split{stage, ActionType::W, microbatch};
  if (index.find(split)) return split;
  return {stage, ActionType::B, microbatch};
}

std::vector<Action> dependencies(const Action& a, const Schedule& schedule, Form form,
                                 const ActionIndex& index) {
  const int s = a.stage;
  const int m = a.microbatch;
  const int last = schedule.num_stages - 1;
  const bool lowered = form == Form::Lowered;
  std::vector<Action> deps;
  switch (a.type) {
    case ActionType::F:
      if (s > 0) {
        if (lowered && !same_device(schedule, s - 1, s))
          deps.push_back({s, ActionType::RECV_F, m});
        else
          deps.push_back({s - 1, ActionType::F, m});
      }
      break;
    case ActionType::B:
    case ActionType::I:
      deps.push_back({s, ActionType::F, m});
      if (s < last) {
        if (lowered && !same_device(schedule, s, s + 1))
          deps.push_back({s, ActionType::RECV_B, m});
        else
          deps.push_back(backward_of(s + 1, m, index));
      }
      break;
    case ActionType::W: deps.push_back({s, ActionType::I, m}); break;
    case ActionType::SEND_F: deps.push_back({s, ActionType::F, m}); break;
    case ActionType::RECV_F: deps.push_back({s - 1, ActionType::SEND_F, m}); break;
    case ActionType::SEND_B: deps.push_back(backward_of(s, m, index)); break;
    case ActionType::RECV_B: deps.push_back({s + 1, ActionType::SEND_B, m}); break;
    case ActionType::REDUCE_GRAD:
      for (int mb = 0; mb < schedule.microbatches; ++mb)
        deps.push_back(weight_grad_of(s, mb, index));
      break;
    case ActionType::UPDATE: {
      const int M = schedule.microbatches_per_step();
      for (int mb = m * M; mb < (m + 1) * M; ++mb) deps.push_back(weight_grad_of(s, mb, index));
      break;
    }
  }
  return deps;
}

}  // namespace pt::sched
