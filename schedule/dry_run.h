#pragma once
// The dry run: every device walks its list as the runtime would, each action waiting for its
// dependencies (schedule/dependencies.h). It finds deadlocks before anything runs: when no device
// can advance and some are not done, it says where each device is stuck and what it waits for.
// The timed simulator is the same walk with clocks attached (it passes `on_execute`).
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "schedule/dependencies.h"

namespace pt::sched {

// Where one device stopped, and why.
struct Stuck {
  Slot at;                        // the action it cannot start
  std::vector<Action> waits_for;  // its dependencies not executed (or in no list)
  std::string explain(const ActionIndex& index) const;  // "waits for 1SEND_B0 (device 1, step 5)"
};

struct DryRunResult {
  bool completed = false;     // every action of every device executed
  std::vector<int> executed;  // per device: how many of its actions ran
  std::vector<Stuck> stuck;   // one per device that did not finish
};

// Called once per executed action, dependencies first: `deps` are the slots of the actions it
// waited for (all executed already).
using OnExecute = std::function<void(Slot self, std::span<const Slot> deps)>;

// Walks `schedule` in the given form. The result does not depend on the order in which devices
// are advanced: an action's readiness depends only on what it waits for.
DryRunResult dry_run(const Schedule& schedule, Form form, const OnExecute& on_execute = {});

}  // namespace pt::sched
