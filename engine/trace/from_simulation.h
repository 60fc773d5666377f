#pragma once
// A simulated step (schedule/simulate.h) as a Trace, so the simulator's prediction can be drawn
// (timeline_svg.h), opened in Perfetto (chrome_trace.h) and measured (bubble.h) exactly like a
// recorded step, and the two compared side by side.
#include <string>
#include <vector>

#include "engine/trace/trace.h"
#include "schedule/simulate.h"

namespace pt {

// The simulator's timeline is already in microseconds (its seconds converted); `time_scale`
// multiplies every time: 1 keeps them, for a simulation from measured costs to set beside a
// recorded step; 1e-3 draws a unit-time simulation (F = 1 s) at 1 ms per unit. `device_names`
// empty: "sim:0", "sim:1", ...; otherwise one per device of the simulated schedule (throws
// UsageError when the count differs).
Trace trace_from_simulation(const sched::SimResult& sim, double time_scale = 1,
                            std::vector<std::string> device_names = {}, int step = 0);

}  // namespace pt
