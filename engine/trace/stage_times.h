#pragma once
// Per-stage action times read off one step of a trace: what the timed simulator
// (schedule/simulate.h) takes, measured instead of estimated. Simulating a schedule with the
// times its own run measured says how long the step would take and where its bubbles would sit
// if every action took its measured time and nothing else cost anything: set beside the measured
// step, the difference is what the simulator does not model (waiting on transfers, threads
// waking, the runtime's own work), not an error in a FLOP estimate.
#include <vector>

#include "engine/trace/trace.h"
#include "schedule/simulate.h"

namespace pt {

// For each stage 0..num_stages-1: the median duration (seconds) of its F actions in `step`, and
// of its B actions, or of its I and W actions when it ran no B (b stays < 0 then, as the
// simulator expects). Medians, so one action delayed by the machine does not stand for all.
// Throws UsageError naming the stage when a stage ran no forward or no backward in that step.
std::vector<sched::StageTimes> measured_stage_times(const Trace& trace, int step, int num_stages);

}  // namespace pt
