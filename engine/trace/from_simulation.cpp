#include "engine/trace/from_simulation.h"

#include <fmt/format.h>

#include <cmath>

#include "engine/core/error.h"

namespace pt {

Trace trace_from_simulation(const sched::SimResult& sim, double time_scale,
                            std::vector<std::string> device_names, int step) {
  const auto D = static_cast<int>(sim.timeline.size());
  if (!(time_scale > 0) || !std::isfinite(time_scale))
    throw UsageError(fmt::format(
        "trace_from_simulation: time_scale must be a positive number, got {}", time_scale));
  if (device_names.empty()) device_names = default_device_names(D, "sim");
  if (static_cast<int>(device_names.size()) != D)
    throw UsageError(
        fmt::format("trace_from_simulation: the simulated schedule has {} devices but "
                    "{} device names were given; pass one name per device, or none",
                    D, device_names.size()));
  std::vector<std::vector<sched::TimedAction>> timeline = sim.timeline;
  for (auto& list : timeline)
    for (sched::TimedAction& t : list) {
      t.start_us *= time_scale;
      t.end_us *= time_scale;
    }
  return make_trace(std::move(device_names), timeline, step);
}

}  // namespace pt
