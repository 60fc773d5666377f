#pragma once
// Measuring with every device busy (engine/partition/profile_costs.cpp, step_overheads.cpp): a
// device's speed depends on what the others do (shared caches, memory bandwidth, and on the CPU
// backend the same cores), so its costs are taken while they all work, as in a training step.
#include <barrier>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/backend.h"

namespace pt {

// Runs body(d, together) on one thread per device, bound to devices[d], all at once, and rethrows
// the first failure after every thread ended. `together` lets timed rounds start on every device
// at the same moment (a thread that fails drops out of it, so the others do not wait for it).
void on_every_device(const std::vector<Backend*>& devices,
                     const std::function<void(size_t, std::barrier<>&)>& body);

// Where such a measurement ran, for reports: "cpu:0..cpu:1 at once", or the one device's name.
std::string every_device_at_once(const std::vector<Backend*>& devices);

}  // namespace pt
