#include "engine/trace/stage_times.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>

#include "engine/core/error.h"

namespace pt {

namespace {

// Seconds; 0 for none (the caller decides whether none is an error).
double median_seconds(std::vector<double> us) {
  if (us.empty()) return 0;
  const size_t mid = us.size() / 2;
  std::nth_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(mid), us.end());
  double m = us[mid];
  if (us.size() % 2 == 0) {
    const double below =
        *std::max_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(mid));
    m = (m + below) / 2;
  }
  return m / sched::kMicrosecondsPerSecond;
}

}  // namespace

std::vector<sched::StageTimes> measured_stage_times(const Trace& trace, int step, int num_stages) {
  check_trace(trace);
  using sched::ActionType;
  struct Durations {
    std::vector<double> f, b, i, w;
  };
  std::vector<Durations> per_stage(static_cast<size_t>(std::max(num_stages, 0)));
  for (const TraceEvent& e : events_of_step(trace, step)) {
    const int s = e.action.stage;
    if (s < 0 || s >= num_stages || !sched::is_compute(e.action.type)) continue;
    Durations& d = per_stage[static_cast<size_t>(s)];
    const double us = e.end_us - e.start_us;
    switch (e.action.type) {
      case ActionType::F: d.f.push_back(us); break;
      case ActionType::B: d.b.push_back(us); break;
      case ActionType::I: d.i.push_back(us); break;
      case ActionType::W: d.w.push_back(us); break;
      default: break;
    }
  }
  std::vector<sched::StageTimes> out;
  for (int s = 0; s < num_stages; ++s) {
    const Durations& d = per_stage[static_cast<size_t>(s)];
    if (d.f.empty() || (d.b.empty() && (d.i.empty() || d.w.empty())))
      throw UsageError(fmt::format(
          "step {} of the trace has no {} of stage {}: its action times cannot be measured", step,
          d.f.empty() ? "forward" : "backward", s));
    sched::StageTimes t;
    t.f = median_seconds(d.f);
    if (!d.b.empty()) {
      t.b = median_seconds(d.b);
    } else {
      t.b = -1;
      t.i = median_seconds(d.i);
      t.w = median_seconds(d.w);
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace pt
