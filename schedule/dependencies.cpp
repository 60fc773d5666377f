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

namespace {
constexpr int kActionTypes = static_cast<int>(ActionType::UPDATE) + 1;
}  // namespace

int64_t ActionIndex::dense_key(const Action& a) const {
  const int type = static_cast<int>(a.type);
  // micro-batch -1 (REDUCE_GRAD) .. M: M + 2 columns.
  if (a.stage < 0 || a.stage >= stages_ || type >= kActionTypes || a.microbatch < -1 ||
      a.microbatch > microbatches_)
    return -1;
  return (static_cast<int64_t>(a.stage) * kActionTypes + type) * (microbatches_ + 2) +
         (a.microbatch + 1);
}

ActionIndex::ActionIndex(const Schedule& schedule)
    : stages_(schedule.num_stages > 0 ? schedule.num_stages : 0),
      microbatches_(schedule.microbatches > 0 ? schedule.microbatches : 0) {
  // A valid schedule fills a few percent of the table or more; a header that claims far more
  // stages or micro-batches than its lists hold (a fuzzed file) gets no table, only the map.
  size_t actions = 0;
  for (const auto& list : schedule.actions) actions += list.size();
  const double table = static_cast<double>(stages_) * kActionTypes * (microbatches_ + 2.0);
  if (table > 64.0 * static_cast<double>(actions) + 4096.0) stages_ = microbatches_ = 0;
  dense_.assign(
      static_cast<size_t>(stages_) * kActionTypes * static_cast<size_t>(microbatches_ + 2), Slot{});
  for (size_t d = 0; d < schedule.actions.size(); ++d) {
    const auto& list = schedule.actions[d];
    for (size_t i = 0; i < list.size(); ++i) {
      const Slot here{static_cast<int>(d), static_cast<int>(i)};
      if (const int64_t k = dense_key(list[i]); k >= 0) {
        if (dense_[static_cast<size_t>(k)].device < 0) dense_[static_cast<size_t>(k)] = here;
      } else {
        out_of_range_.try_emplace(key_of(list[i]), here);
      }
    }
  }
}

std::optional<Slot> ActionIndex::find(const Action& action) const {
  if (const int64_t k = dense_key(action); k >= 0) {
    const Slot s = dense_[static_cast<size_t>(k)];
    if (s.device < 0) return std::nullopt;
    return s;
  }
  const auto it = out_of_range_.find(key_of(action));
  if (it == out_of_range_.end()) return std::nullopt;
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
