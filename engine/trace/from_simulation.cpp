#include "engine/trace/from_simulation.h"

#include <fmt/format.h>

#include <cmath>

#include "engine/core/error.h"

namespace pt {

Trace trace_from_simulation(const sched::SimResult& sim, double us_per_unit,
                            std::vector<std::string> device_names, int step) {
  const auto D = static_cast<int>(sim.timeline.size());
  if (!(us_per_unit > 0) || !std::isfinite(us_per_unit))
    throw UsageError(
        fmt::format("trace_from_simulation: us_per_unit must be a positive number, "
                    "got {}",
                    us_per_unit));
  if (device_names.empty()) device_names = default_device_names(D, "sim");
  if (static_cast<int>(device_names.size()) != D)
    throw UsageError(
        fmt::format("trace_from_simulation: the simulated schedule has {} devices but "
                    "{} device names were given; pass one name per device, or none",
                    D, device_names.size()));
  std::vector<TimelineRow> rows;
  for (int d = 0; d < D; ++d)
    for (const sched::TimedAction& t : sim.timeline[static_cast<size_t>(d)])
      rows.push_back({d, t.action, t.start * us_per_unit, t.end * us_per_unit});
  return make_trace(std::move(device_names), rows, step);
}

}  // namespace pt
