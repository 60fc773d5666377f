#pragma once
// An execution trace: which action ran on which pipeline device, from when to when. The runtime
// records one TraceEvent per executed action; a simulator can produce the same shape from its
// modelled times (make_trace below), so measured and predicted timelines share every viewer:
// write_chrome_trace (chrome_trace.h), measure_bubble (bubble.h), the SVG timeline
// (timeline_svg.h).
//
// Times are microseconds. Within one step only differences matter (the bubble and the SVG start
// the step at its earliest event), so times may count from the step's start or the run's start.
// A trace holding several steps should count from the run's start, or the steps pile up on top of
// each other in the Chrome/Perfetto view.
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "schedule/action.h"

namespace pt {

struct TraceEvent {
  int device = 0;                   // pipeline device (track), index into Trace::device_names
  sched::Action action;             // what ran (schedule/action.h)
  double start_us = 0, end_us = 0;  // microseconds since the step (or run) began
  int step = 0;                     // training step it belongs to
};

struct Trace {
  std::vector<std::string> device_names;  // one per device: "cpu:0", "cuda:1", ...
  std::vector<TraceEvent> events;         // any order
};

// A generic timeline row (device, action, start, end), e.g. from a cost model or another tool.
// Scale abstract time units to microseconds first (1 unit = 1000 us reads as 1 ms per unit).
// schedule/simulate.h's results convert directly: trace_from_simulation (from_simulation.h).
struct TimelineRow {
  int device = 0;
  sched::Action action;
  double start_us = 0, end_us = 0;
};

// Builds a Trace of one step from a timeline; checks it like check_trace.
Trace make_trace(std::vector<std::string> device_names, std::span<const TimelineRow> timeline,
                 int step = 0);

// "cpu:0", "cpu:1", ... for D devices: names for traces that have no real devices (simulations).
std::vector<std::string> default_device_names(int num_devices, std::string_view kind = "cpu");

// Throws UsageError, naming the event, when an event's device has no name in device_names, or a
// time is not finite, or an event ends before it starts. Every writer calls this first.
void check_trace(const Trace& trace);

// The events of one step, in the order they appear in the trace.
std::vector<TraceEvent> events_of_step(const Trace& trace, int step);

// The distinct steps the trace has events of, ascending.
std::vector<int> steps_in(const Trace& trace);

}  // namespace pt
