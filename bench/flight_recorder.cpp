// bench/flight_recorder: what the always-on flight recorder (engine/trace/flight_recorder.h)
// costs. Prints JSON lines:
//
//   {"bench":"flight_recorder_event", "threads":T, "enabled":0|1, "ns_median", "ns_min",
//    "ns_max", "reps"}   one begin() + finish() pair, per thread, T threads recording at once
//   {"bench":"flight_recorder_train", "stages":S, "microbatches":M, "actions_per_step",
//    "step_ms_on_median", "step_ms_on_min", "step_ms_on_max", "step_ms_off_median", ...,
//    "overhead_pct"}   pipeline training steps (fashion MLP, 1 core per device) with the
//    recorder on and off, repetitions interleaved (on, off, on, ...) so drift hits both alike;
//    overhead_pct = 100 * (median on - median off) / median off; "bound_pct" = the events of one
//    step times the single-thread event cost, over the step: what the recorder can cost at most
//    when nothing else differs (the measured difference is within the machine's noise).
//   {"bench":"step_trace_train", ..., "step_ms_traced_median", ..., "step_ms_untraced_median",
//    ..., "overhead_pct", "trace_ns_per_action", "bound_pct"}   the same steps with the
//    per-action trace (the bubble report's timing events, Backend::record_timing_event) recorded
//    and not, interleaved the same way; bound_pct = the trace's own work per action (timed alone)
//    times the actions of a step, over the untraced step
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/repeated_seconds.h"
#include "bench/synthetic_batch.h"
#include "engine/pipeline/executor.h"
#include "engine/setup/training_run.h"
#include "engine/trace/flight_recorder.h"
#include "layers/zoo.h"

namespace {

using Clock = std::chrono::steady_clock;

using pt::bench::Spread;
using pt::bench::spread_of;

// ns per begin()+finish() on each of `threads` threads recording at once.
double event_ns(pt::FlightRecorder& r, int threads, int64_t events) {
  std::vector<std::thread> pool;
  const auto t0 = Clock::now();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      pt::FlightEvent e;
      e.device = t;
      for (int64_t i = 0; i < events; ++i) {
        e.index = static_cast<int>(i);
        r.finish(r.begin(e), pt::FlightState::finished);
      }
    });
  for (auto& p : pool) p.join();
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() /
         static_cast<double>(events);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pipetrain-bench-flight-recorder: the cost of the flight recorder"};
  int reps = 7, stages = 2, microbatches = 8, steps = 10;
  int64_t events = 1'000'000, batch = 64;
  app.add_option("--reps", reps, "repetitions of each measurement (median, min, max)");
  app.add_option("--events", events, "events per repetition and thread");
  app.add_option("--stages", stages, "pipeline stages S");
  app.add_option("--microbatches", microbatches, "micro-batches M");
  app.add_option("--steps", steps, "training steps per repetition");
  app.add_option("--batch", batch, "batch size");
  CLI11_PARSE(app, argc, argv);

  // ---- one event ----
  for (int threads : {1, 2})
    for (bool enabled : {true, false}) {
      pt::FlightRecorder r(4096);
      r.set_enabled(enabled);
      event_ns(r, threads, events / 10);  // warm-up
      std::vector<double> ns;
      for (int i = 0; i < reps; ++i) ns.push_back(event_ns(r, threads, events));
      const Spread s = spread_of(ns);
      pt::bench::emit({{"bench", "flight_recorder_event"},
                       {"threads", int64_t{threads}},
                       {"enabled", int64_t{enabled}},
                       {"ns_median", s.median},
                       {"ns_min", s.min},
                       {"ns_max", s.max},
                       {"reps", int64_t{reps}}});
    }

  // ---- training steps, recorder on and off ----
  pt::TrainingOptions opt;
  opt.devices = fmt::format("cpu:0..{}", stages - 1);
  opt.threads = 1;
  opt.stages = stages;
  opt.microbatches = microbatches;
  opt.print = false;
  pt::Model model = pt::fashion_mlp();
  pt::TrainingRun run =
      pt::make_training(opt, model, pt::fashion_mlp, pt::bench::sgd_config(microbatches), batch);
  pt::bench::Batch data(batch);
  pt::FlightRecorder& recorder = pt::flight_recorder();
  int64_t actions = 0;
  for (const auto& l : recorder.action_lists())
    if (l.list == pt::FlightList::training) actions += static_cast<int64_t>(l.actions.size());
  const auto timed_steps = [&](bool on) {
    recorder.set_enabled(on);
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) run.engine->train_step(data.hx, data.hy);
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
  };
  timed_steps(true);  // warm-up
  timed_steps(false);
  std::vector<double> on, off;
  for (int i = 0; i < reps; ++i) {
    on.push_back(timed_steps(true));
    off.push_back(timed_steps(false));
  }
  recorder.set_enabled(true);
  const Spread a = spread_of(on), b = spread_of(off);
  pt::FlightRecorder probe(4096);
  const double one_event_ns = event_ns(probe, 1, events);
  // The fields of both step comparisons: the run, and the medians and spreads of the steps
  // with a kind of recording on and off.
  const auto comparison = [&](const std::string& bench, const std::string& on_name,
                              const std::string& off_name, const Spread& a, const Spread& b) {
    return pt::bench::Fields{{"bench", bench},
                             {"model", "fashion_mlp"},
                             {"stages", int64_t{stages}},
                             {"microbatches", int64_t{microbatches}},
                             {"batch", batch},
                             {"steps_per_rep", int64_t{steps}},
                             {"reps", int64_t{reps}},
                             {"actions_per_step", actions},
                             {"step_ms_" + on_name + "_median", a.median},
                             {"step_ms_" + on_name + "_min", a.min},
                             {"step_ms_" + on_name + "_max", a.max},
                             {"step_ms_" + off_name + "_median", b.median},
                             {"step_ms_" + off_name + "_min", b.min},
                             {"step_ms_" + off_name + "_max", b.max},
                             {"overhead_pct", 100.0 * (a.median - b.median) / b.median}};
  };
  pt::bench::Fields recorder_fields = comparison("flight_recorder_train", "on", "off", a, b);
  recorder_fields.push_back(
      {"bound_pct", 100.0 * static_cast<double>(actions) * one_event_ns * 1e-6 / b.median});
  pt::bench::emit(recorder_fields);

  // ---- training steps, per-action trace on and off (the recorder on) ----
  if (!run.pipeline) return 0;  // one stage: no pipeline, no trace
  const auto traced_steps = [&](bool on) {
    run.pipeline->set_record_trace(on);
    return timed_steps(true);
  };
  traced_steps(false);  // warm-up
  std::vector<double> traced, untraced;
  for (int i = 0; i < reps; ++i) {
    traced.push_back(traced_steps(true));
    untraced.push_back(traced_steps(false));
  }
  run.pipeline->set_record_trace(true);
  const Spread t = spread_of(traced), u = spread_of(untraced);
  // What the trace adds per action, alone: what Executor::run does for it (two timing events,
  // read once the list is done, into one ExecutedAction).
  const auto trace_ns = [&] {
    pt::Backend& b = *run.backends[0];
    const size_t n = 4096;
    std::vector<std::unique_ptr<pt::TimingEvent>> marks;
    std::vector<pt::ExecutedAction> out;
    const auto t0 = Clock::now();
    const auto anchor = b.record_timing_event();
    marks.reserve(2 * n);
    for (size_t i = 0; i < 2 * n; ++i) marks.push_back(b.record_timing_event());
    for (size_t i = 0; i < n; ++i)
      out.push_back({pt::sched::Action{}, 1e6 * marks[2 * i]->seconds_since(*anchor),
                     1e6 * marks[2 * i + 1]->seconds_since(*anchor)});
    return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() /
           static_cast<double>(n);
  };
  trace_ns();  // warm-up
  std::vector<double> per_action;
  for (int i = 0; i < reps; ++i) per_action.push_back(trace_ns());
  const double action_ns = spread_of(per_action).median;
  pt::bench::Fields trace_fields = comparison("step_trace_train", "traced", "untraced", t, u);
  trace_fields.push_back({"trace_ns_per_action", action_ns});
  trace_fields.push_back(
      {"bound_pct", 100.0 * static_cast<double>(actions) * action_ns * 1e-6 / u.median});
  pt::bench::emit(trace_fields);
  return 0;
}
