#pragma once
// An execution trace: which action ran on which pipeline device, from when to when. The runtime
// records each device's executed actions (PipelineTrainer::last_trace, step_trace.h); a simulator
// produces the same per-device timelines from its modelled times (trace_from_simulation in
// from_simulation.h); make_trace turns either into a Trace, so measured and predicted timelines
// share every viewer: write_chrome_trace (chrome_trace.h), measure_bubble (bubble.h), the SVG
// timeline (timeline_svg.h).
//
// Times are microseconds (schedule/timed_action.h). Within one step only differences matter (the
// bubble and the SVG start the step at its earliest event), so times may count from the step's
// start or the run's start. A trace holding several steps should count from the run's start, or
// the steps pile up on top of each other in the Chrome/Perfetto view.
#include <string>
#include <string_view>
#include <vector>

#include "schedule/timed_action.h"

namespace pt {

// One timed action (what ran, start_us, end_us) placed on a device's track and a step.
struct TraceEvent : sched::TimedAction {
  int device = 0;  // pipeline device (track), index into Trace::device_names
  int step = 0;    // training step it belongs to
};

struct Trace {
  std::vector<std::string> device_names;  // one per device: "cpu:0", "cuda:1", ...
  std::vector<TraceEvent> events;         // any order
};

// Builds a Trace of one step from per-device timelines: timeline[d] is device d's actions, in
// microseconds (a simulator's or a cost model's abstract units scaled first). Throws UsageError
// when the number of timelines and of names differ; checks the result like check_trace.
Trace make_trace(std::vector<std::string> device_names,
                 const std::vector<std::vector<sched::TimedAction>>& timeline, int step = 0);

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
