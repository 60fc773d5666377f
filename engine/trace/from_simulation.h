#pragma once
// A simulated step (schedule/simulate.h) as a Trace, so the simulator's prediction can be drawn
// (timeline_svg.h), opened in Perfetto (chrome_trace.h) and measured (bubble.h) exactly like a
// recorded step, and the two compared side by side.
#include <string>
#include <vector>

#include "engine/trace/trace.h"
#include "schedule/simulate.h"

namespace pt {

// The simulator counts time in the units of its StageTimes; `us_per_unit` scales them to
// microseconds (1000: one unit reads as 1 ms). `device_names` empty: "sim:0", "sim:1", ...;
// otherwise one per device of the simulated schedule (throws UsageError when the count differs).
Trace trace_from_simulation(const sched::SimResult& sim, double us_per_unit = 1000,
                            std::vector<std::string> device_names = {}, int step = 0);

}  // namespace pt
