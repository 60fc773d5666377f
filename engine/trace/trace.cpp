#include "engine/trace/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "engine/core/error.h"

namespace pt {

Trace make_trace(std::vector<std::string> device_names,
                 const std::vector<std::vector<sched::TimedAction>>& timeline, int step) {
  if (timeline.size() != device_names.size())
    throw UsageError(
        fmt::format("make_trace: {} device timelines but {} device names; give one name per device",
                    timeline.size(), device_names.size()));
  Trace trace;
  trace.device_names = std::move(device_names);
  for (size_t d = 0; d < timeline.size(); ++d)
    for (const sched::TimedAction& t : timeline[d])
      trace.events.push_back({t, static_cast<int>(d), step});
  check_trace(trace);
  return trace;
}

std::vector<std::string> default_device_names(int num_devices, std::string_view kind) {
  std::vector<std::string> names;
  for (int d = 0; d < num_devices; ++d) names.push_back(fmt::format("{}:{}", kind, d));
  return names;
}

void check_trace(const Trace& trace) {
  const auto num_devices = static_cast<int>(trace.device_names.size());
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.device < 0 || e.device >= num_devices)
      throw UsageError(fmt::format(
          "trace event {} ({}, step {}) is on device {}, but the trace names {} device(s); "
          "give every device a name in Trace::device_names",
          i, e.action.str(), e.step, e.device, num_devices));
    if (!std::isfinite(e.start_us) || !std::isfinite(e.end_us))
      throw UsageError(
          fmt::format("trace event {} ({} on {}, step {}) has a non-finite time "
                      "(start {} us, end {} us)",
                      i, e.action.str(), trace.device_names[static_cast<size_t>(e.device)], e.step,
                      e.start_us, e.end_us));
    if (e.end_us < e.start_us)
      throw UsageError(fmt::format(
          "trace event {} ({} on {}, step {}) ends before it starts (start {} us, end {} us)", i,
          e.action.str(), trace.device_names[static_cast<size_t>(e.device)], e.step, e.start_us,
          e.end_us));
  }
}

std::vector<TraceEvent> events_of_step(const Trace& trace, int step) {
  std::vector<TraceEvent> out;
  for (const TraceEvent& e : trace.events)
    if (e.step == step) out.push_back(e);
  return out;
}

std::vector<int> steps_in(const Trace& trace) {
  std::vector<int> steps;
  for (const TraceEvent& e : trace.events) steps.push_back(e.step);
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

}  // namespace pt
