#include "schedule/dry_run.h"

namespace pt::sched {

std::string Stuck::explain(const ActionIndex& index) const {
  std::string out;
  for (const Action& dep : waits_for) {
    out += out.empty() ? "waits for " : ", ";
    out += dep.str();
    if (const auto slot = index.find(dep))
      out += " (device " + std::to_string(slot->device) + ", step " + std::to_string(slot->index) +
             ", not yet run)";
    else
      out += " (in no device's list)";
  }
  return out;
}

DryRunResult dry_run(const Schedule& schedule, Form form, const OnExecute& on_execute) {
  const ActionIndex index(schedule);
  const size_t num_devices = schedule.actions.size();
  std::vector<std::vector<bool>> done(num_devices);
  for (size_t d = 0; d < num_devices; ++d) done[d].assign(schedule.actions[d].size(), false);
  std::vector<int> next(num_devices, 0);

  // The slots of `action`'s dependencies when all have run; nullopt when one has not.
  auto ready = [&](const Action& action) -> std::optional<std::vector<Slot>> {
    std::vector<Slot> slots;
    for (const Action& dep : dependencies(action, schedule, form, index)) {
      const auto slot = index.find(dep);
      if (!slot) return std::nullopt;
      if (!done[static_cast<size_t>(slot->device)][static_cast<size_t>(slot->index)])
        return std::nullopt;
      slots.push_back(*slot);
    }
    return slots;
  };

  // Round-robin until a full pass advances nothing. Each pass runs every device as far as it can,
  // so the number of passes is bounded by the longest dependency chain across devices.
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t d = 0; d < num_devices; ++d) {
      const auto& list = schedule.actions[d];
      while (static_cast<size_t>(next[d]) < list.size()) {
        const auto deps = ready(list[static_cast<size_t>(next[d])]);
        if (!deps) break;
        const Slot self{static_cast<int>(d), next[d]};
        if (on_execute) on_execute(self, *deps);
        done[d][static_cast<size_t>(next[d])] = true;
        ++next[d];
        progress = true;
      }
    }
  }

  DryRunResult result;
  result.executed = next;
  result.completed = true;
  for (size_t d = 0; d < num_devices; ++d) {
    const auto& list = schedule.actions[d];
    if (static_cast<size_t>(next[d]) == list.size()) continue;
    result.completed = false;
    Stuck stuck;
    stuck.at = Slot{static_cast<int>(d), next[d]};
    for (const Action& dep :
         dependencies(list[static_cast<size_t>(next[d])], schedule, form, index)) {
      const auto slot = index.find(dep);
      if (!slot || !done[static_cast<size_t>(slot->device)][static_cast<size_t>(slot->index)])
        stuck.waits_for.push_back(dep);
    }
    result.stuck.push_back(std::move(stuck));
  }
  return result;
}

}  // namespace pt::sched
