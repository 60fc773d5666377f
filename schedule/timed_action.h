#pragma once
// An action with a start and an end: one entry of a timeline, whoever made it — the simulator's
// prediction (schedule/simulate.h), the runtime's record of a step (PipelineTrainer::last_trace)
// and a trace's events (engine/trace/trace.h) are all lists of these.
//
// Times are microseconds, always: the runtime measures them so, the simulator converts its
// seconds once when it writes its timeline, and every viewer (Chrome trace, SVG timeline,
// measured bubble) reads them so. Where time 0 is depends on the maker (the step's start for the
// runtime and the simulator); only differences within one step carry meaning.
// This header depends on the standard library only (schedule/ is pure code).
#include "schedule/action.h"

namespace pt::sched {

inline constexpr double kMicrosecondsPerSecond = 1e6;

struct TimedAction {
  Action action;
  double start_us = 0, end_us = 0;  // microseconds; end_us >= start_us
};

}  // namespace pt::sched
