#include "engine/trace/bubble.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <limits>

#include "engine/core/error.h"

namespace pt {

double BubbleStats::mean_bubble_fraction() const {
  if (bubble_fraction.empty()) return 0;
  double sum = 0;
  for (double f : bubble_fraction) sum += f;
  return sum / static_cast<double>(bubble_fraction.size());
}

BubbleStats measure_bubble(const Trace& trace, int step) {
  check_trace(trace);
  const std::vector<TraceEvent> events = events_of_step(trace, step);
  if (events.empty())
    throw UsageError(fmt::format("the trace has no events of step {} (it has steps [{}])", step,
                                 fmt::join(steps_in(trace), ", ")));

  const size_t D = trace.device_names.size();
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> first(D, inf), last(D, -inf);  // per device: earliest start, latest end
  BubbleStats stats;
  stats.busy_us.assign(D, 0);
  for (const TraceEvent& e : events) {
    const auto d = static_cast<size_t>(e.device);
    first[d] = std::min(first[d], e.start_us);
    last[d] = std::max(last[d], e.end_us);
    if (sched::is_compute(e.action.type)) stats.busy_us[d] += e.end_us - e.start_us;
  }

  const double step_start = *std::min_element(first.begin(), first.end());
  const double step_end = *std::max_element(last.begin(), last.end());
  stats.step_span_us = step_end - step_start;
  stats.span_us.assign(D, 0);
  stats.bubble_fraction.assign(D, 0);
  for (size_t d = 0; d < D; ++d) {
    if (first[d] <= last[d]) stats.span_us[d] = last[d] - first[d];
    if (stats.step_span_us > 0)
      stats.bubble_fraction[d] = 1 - stats.busy_us[d] / stats.step_span_us;
  }
  return stats;
}

}  // namespace pt
