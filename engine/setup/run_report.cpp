// After training (training_run.h, report_pipeline): the last step's gradient reduction, its
// measured bubble beside the one simulated from its own action times, the trace and timeline
// files, the whole step beside --plan auto's prediction.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/pipeline/step_trace.h"
#include "engine/setup/training_run.h"
#include "engine/trace/bubble.h"
#include "engine/trace/chrome_trace.h"
#include "engine/trace/stage_times.h"
#include "engine/trace/timeline_svg.h"

namespace pt {

namespace {

// The whole step as the training loop sees it (schedule, all-reduce not hidden behind
// backward, norm, update) and, after --plan auto, the chosen plan's prediction beside it.
// `span_s`: the last step's schedule span (0 for one device, which has none).
void report_whole_step(const TrainingRun& s, double span_s) {
  const double whole_s = s.timed ? s.timed->recent_step_seconds() : 0;
  if (whole_s > 0)
    fmt::print("whole training step: {:.2f} ms (median of the last full steps)\n", whole_s * 1e3);
  if (!s.auto_plan || whole_s <= 0) return;
  const PlanCandidate& c = *s.auto_plan;
  fmt::print(
      "plan auto: the chosen plan ({}{} x {}, M = {}, {}, recompute {}) predicted {:.2f} ms per "
      "step ({:.2f} pipeline + {:.2f} all-reduce + {:.2f} norm and update), measured "
      "{:.2f} ms ({:+.0f}%{})\n",
      c.threads > 1 ? fmt::format("{} threads, ", c.threads) : "", c.stages, c.replicas,
      c.microbatches, c.schedule, c.recompute.str(), c.step_s * 1e3, c.pipeline_s * 1e3,
      c.allreduce_s * 1e3, c.epilogue_s * 1e3, whole_s * 1e3, 100 * (whole_s - c.step_s) / c.step_s,
      span_s > 0 ? fmt::format("; the schedule's span {:.2f} ms vs {:.2f} predicted", span_s * 1e3,
                               c.pipeline_s * 1e3)
                 : "");
}

}  // namespace

namespace {

// What replica 0 holds between steps, and its devices' peaks in the last step: the numbers that
// tell the sharding modes apart (full sharding also says the most it gathered at once).
void report_memory(const TrainingRun& s, Communicator* world) {
  const HeldBytes held = s.pipeline->held_bytes();
  const auto mib = [](size_t b) { return static_cast<double>(b) / (1 << 20); };
  std::vector<std::string> peaks;
  const std::vector<size_t> peak = s.pipeline->last_peak_bytes();
  for (size_t d = 0; d < peak.size(); ++d)
    if (peak[d]) peaks.push_back(fmt::format("{:.2f}", mib(peak[d])));
  fmt::print(
      "memory held between steps ({}): parameters {:.2f} MiB, gradients {:.2f} MiB, optimizer "
      "state {:.2f} MiB{}; device peak in the last step: {} MiB\n",
      world ? "this process" : "replica 0", mib(held.parameters), mib(held.gradients),
      mib(held.optimizer),
      held.gathered_peak
          ? fmt::format("; gathered during the step: at most {:.2f} MiB", mib(held.gathered_peak))
          : "",
      fmt::join(peaks, " "));
}

}  // namespace

void report_pipeline(const TrainingOptions& opt, const TrainingRun& s, Communicator* world) {
  if (!s.pipeline) {
    if (!world) report_whole_step(s, 0);  // one device
    return;
  }
  if (s.pipeline->step() == 0) return;
  // Resumed at (or past) the last step: no step ran in this process, so there is no last step to
  // report (its trace would be empty; measuring it used to fail with an internal trace error).
  if (s.pipeline->last_trace().empty()) {
    if (!opt.trace.empty() || !opt.timeline.empty())
      fmt::print("no step ran in this run: no trace or timeline of a last step to write\n");
    return;
  }
  for (const ReductionStats& rs : s.pipeline->last_reduction_stats())
    fmt::print(
        "gradient all-reduce in the last step: {} bucket(s), {:.2f} ms, {:.0f}% hidden behind "
        "backward\n",
        rs.buckets, rs.reduce_s * 1e3, 100 * rs.hidden_fraction());
  for (const ReductionStats& rs : s.pipeline->last_shard_stats())
    fmt::print(
        "full sharding's gathers and reduce-scatters in the last step: {}, {:.2f} ms, {:.0f}% "
        "hidden behind compute\n",
        rs.buckets, rs.reduce_s * 1e3, 100 * rs.hidden_fraction());
  report_memory(s, world);
  if (world) return;  // the other devices' traces are in other processes
  // The last full-size step (an epoch's smaller remainder batch is not compared with the
  // prediction for a full batch).
  if (opt.async_update) {
    // The trace is of the last window (several steps, one bubble), not comparable with the
    // prediction for one synchronous step.
    const Trace trace =
        step_trace(s.pipeline->last_trace(),
                   {s.backends.begin(), s.backends.begin() + s.plan->schedule.num_devices},
                   static_cast<int>(s.pipeline->last_trace_step()));
    const BubbleStats bubble =
        measure_bubble(trace, static_cast<int>(s.pipeline->last_trace_step()));
    fmt::print("last window (from step {}): {:.2f} ms measured; bubble per device:",
               s.pipeline->last_trace_step(), bubble.step_span_us / 1e3);
    for (double b : bubble.bubble_fraction) fmt::print(" {:.1f}%", 100 * b);
    fmt::print("\n");
    return;
  }
  const int step = static_cast<int>(s.pipeline->last_trace_step());
  // Replica 0's devices come first.
  const std::vector<Backend*> replica0(s.backends.begin(),
                                       s.backends.begin() + s.plan->schedule.num_devices);
  const Trace trace = step_trace(s.pipeline->last_trace(), replica0, step);
  const BubbleStats bubble = measure_bubble(trace, step);
  // Beside the measurement, the simulator run with this very step's action times (medians per
  // stage and kind): the plan's own prediction came from costs estimated (or profiled) before
  // training, on an idle machine, and set beside a measurement it blamed the schedule for what
  // the estimate got wrong (the quickstart: 31% predicted, 15.5% measured on stage 0).
  sched::SimConfig replay_with = s.plan->simulated_with;
  replay_with.stages = measured_stage_times(trace, step, s.plan->schedule.num_stages);
  const sched::SimResult replay = sched::simulate(s.plan->schedule, replay_with);
  fmt::print(
      "last full step ({}): {:.2f} ms measured, {:.2f} ms simulated from its own action times; "
      "bubble per device measured / simulated:",
      step, bubble.step_span_us / 1e3, replay.step_time * 1e3);
  for (size_t d = 0; d < bubble.bubble_fraction.size(); ++d)
    fmt::print(" {:.1f}% / {:.1f}%", 100 * bubble.bubble_fraction[d],
               100 * replay.bubble_fraction[d]);
  fmt::print("\nthe plan's prediction before training ({}): {:.2f} ms, bubble per device",
             s.plan->costs, s.plan->predicted_step_s() * 1e3);
  for (double b : s.plan->simulated.bubble_fraction) fmt::print(" {:.1f}%", 100 * b);
  fmt::print("\n");
  report_whole_step(s, bubble.step_span_us * 1e-6);
  if (!opt.trace.empty()) {
    write_chrome_trace(opt.trace, trace);
    fmt::print("wrote the trace of the last full step to {} (open in https://ui.perfetto.dev)\n",
               opt.trace);
  }
  if (!opt.timeline.empty()) {
    write_timeline_svg(opt.timeline, trace, step);
    fmt::print("wrote the timeline of the last full step to {}\n", opt.timeline);
  }
}

}  // namespace pt
