// bench/pipeline: how close pipeline-parallel training on S CPU devices (one core each) comes to
// its ideal, and how well the simulator predicts it. Every figure is measured in this one run and
// every ratio compares figures of this run (the machine is noisy). Prints JSON lines:
//
//   {"bench":"pipeline_config", ...}   model, batch, stages, steps, costs
//   {"bench":"baseline", "devices":1, "threads":1|S, "microbatches":M, "step_ms", "samples_per_s"}
//       one device (Trainer, gradient accumulation over the same M micro-batches)
//   {"bench":"pipeline", "schedule", "microbatches":M, ...}   one line per (schedule, M):
//       step_ms, samples_per_s: the median of the timed steps, with _min and _max (the
//                            spread, bench/repeated_seconds.h) and "reps"
//       speedup            = baseline median step (1 device, 1 core, same M) / pipeline median
//                            step; speedup_min, speedup_max: over the slowest and fastest step
//       ideal (analytic)   = S·M / (M + S − 1)                            gpipe, 1f1b
//       ideal (simulated)  = Σ_s M·(F_s + I_s + W_s) / T_sim        zb-h1, zb-h2, interleaved:V
//                            (profiled per-stage times, free transfers: the schedule's own limit)
//       speedup_over_ideal = speedup / ideal (+ _min, _max); "ideal_kind" says which ideal
//       bubble_err_pp_d    = 100·(measured bubble of device d − analytic_bubble(schedule, D, M))
//                            measured by measure_bubble on each timed step's trace, the median;
//                            bubble_err_vs_sim_pp_d: the same against the simulated bubble with
//                            profiled costs (what is left once stage imbalance is accounted for)
//       predicted_over_measured = T_sim(profiled F/I/W, measured transfers) / measured span of
//                            the action lists (the optimizer step, which the simulator does not
//                            model, is outside both)
//       peak_mib_d, inflight_s  peak bytes per device (last_peak_bytes) and the simulator's
//                            peak in-flight micro-batches per stage
//       wrong              steps whose loss differs from the 1-core baseline's (bit-identical
//                            expected: same micro-batches, same accumulation order, 1 thread)
//   {"bench":"pipeline_memory", "microbatches":8, "schedule", ...}   gpipe vs 1f1b vs zb-h1
//   {"bench":"zb_vs_1f1b", "microbatches":M, "sim_equal_ratio", "measured_ratio", ...}
//   {"bench":"pipeline_summary", ...}  the headline figures and the targets
//
// Timing follows nccl-tests: verify (the loss check above), warm up, then N timed steps: the
// median and the spread are reported, not only the best (which hides a noisy run).
// Exits 3 when a pipeline's losses differ from the reference, 2 on bad flags, 1 on any failure
// to run; performance targets are reported, never enforced.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/repeated_seconds.h"
#include "bench/synthetic_batch.h"
#include "engine/core/error.h"
#include "engine/core/random.h"
#include "engine/partition/layer_costs.h"
#include "engine/partition/on_every_device.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "engine/pipeline/plan.h"
#include "engine/pipeline/step_trace.h"
#include "engine/trace/bubble.h"
#include "engine/trace/trace.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"
#include "schedule/simulate.h"

namespace {

using Clock = std::chrono::steady_clock;
using pt::bench::emit;
using pt::bench::Fields;
using pt::bench::Spread;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();  // json_line writes null

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Flags {
  std::string model = "mlp";
  int64_t batch = 256;
  int stages = 2;  // S devices of 1 core each
  int steps = 10, warmup = 3;
  std::vector<int> microbatches{1, 2, 4, 8, 16};
  std::vector<std::string> schedules{"gpipe", "1f1b", "zb-h1", "interleaved:2"};
  std::string costs = "estimate";  // for the partitioner: estimate | profile
  int profile_repeats = 5;
  bool quick = false;
};

pt::Model make_model(const std::string& name) {
  if (name == "mlp") return pt::fashion_mlp();      // 784-1024x4-10: 10 layers
  if (name == "deep") return pt::deep_mlp(8, 512);  // 784-512x8-10: 18 layers
  throw pt::UsageError(fmt::format("unknown --model '{}': use mlp or deep", name));
}

using pt::bench::Batch;

// ---- timing ------------------------------------------------------------------------------------

struct Timed {
  Spread step_s;               // median, min and max of the timed steps
  int median_step = 0;         // index (among the timed steps) of the step at the median
  std::vector<double> losses;  // every step's loss, warm-up included
};

// Warm-up steps, then `steps` timed ones; `after_timed()` runs after each timed step (outside
// the timing) so the caller can keep what it needs of each (the median step's trace).
template <class Step, class After>
Timed time_steps(int warmup, int steps, Step&& step, After&& after_timed) {
  Timed t;
  std::vector<double> times;
  for (int i = 0; i < warmup; ++i) t.losses.push_back(step().loss);
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    const pt::StepStats s = step();
    times.push_back(seconds_since(t0));
    t.losses.push_back(s.loss);
    after_timed();
  }
  // The lower median's step: a step that really ran, for its trace.
  std::vector<int> order(times.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return times[a] < times[b]; });
  if (!order.empty()) t.median_step = order[(order.size() - 1) / 2];
  t.step_s = pt::bench::spread_of(std::move(times));
  return t;
}

Timed time_single_device(const Flags& f, const Batch& batch, int M, int threads) {
  auto backend = pt::make_cpu_backend(0, threads);
  backend->bind_current_thread();
  pt::Model model = make_model(f.model);
  pt::Trainer trainer(model, *backend, pt::bench::sgd_config(M));
  return time_steps(
      f.warmup, f.steps, [&] { return trainer.train_step(batch.hx, batch.hy); }, [] {});
}

// ---- profiled costs ----------------------------------------------------------------------------

// Per-layer F/I/W of one micro-batch, one profile per micro-batch size: timed on the S 1-thread
// CPU devices at once, each running one stage-sized chunk of the layers (profile_costs_together).
class Profiles {
 public:
  explicit Profiles(const Flags& f) : flags_(f) {
    for (int d = 0; d < std::max(f.stages, 1); ++d) {
      owned_.push_back(pt::make_cpu_backend(d, 1));
      devices_.push_back(owned_.back().get());
    }
  }

  const std::vector<pt::LayerProfile>& at(int64_t microbatch) {
    auto it = cache_.find(microbatch);
    if (it != cache_.end()) return it->second;
    auto costs = pt::profile_costs_together([&] { return make_model(flags_.model); }, devices_,
                                            microbatch, flags_.profile_repeats);
    return cache_.emplace(microbatch, std::move(costs)).first->second;
  }
  // The same profiles for the partition (make_plan) as for the simulated figures.
  pt::LayerProfiler profiler() {
    return {[this](int64_t microbatch) { return at(microbatch); },
            pt::every_device_at_once(devices_)};
  }

 private:
  const Flags& flags_;
  std::vector<std::unique_ptr<pt::Backend>> owned_;
  std::vector<pt::Backend*> devices_;
  std::map<int64_t, std::vector<pt::LayerProfile>> cache_;
};

// Each (virtual) stage's F, I, W: the sum over its layers.
std::vector<pt::sched::StageTimes> stage_times(const pt::Partition& p,
                                               const std::vector<pt::LayerProfile>& costs) {
  std::vector<pt::sched::StageTimes> out;
  for (const pt::StagePlan& st : p.stages) {
    pt::sched::StageTimes t;
    t.f = t.i = t.w = 0;
    for (int l = st.first_layer; l < st.last_layer; ++l) {
      t.f += costs[static_cast<size_t>(l)].forward_s;
      t.i += costs[static_cast<size_t>(l)].backward_input_s;
      t.w += costs[static_cast<size_t>(l)].backward_weight_s;
    }
    out.push_back(t);
  }
  return out;
}

// Mean seconds of the SEND actions across each stage boundary k (stage k <-> k + 1): a send is
// the copy into the receiver's memory plus the post to its mailbox.
std::vector<double> measured_transfers(const std::vector<std::vector<pt::ExecutedAction>>& trace,
                                       int stages) {
  const auto boundaries = static_cast<size_t>(std::max(stages - 1, 0));
  std::vector<double> sum(boundaries, 0.0);
  std::vector<int> count(boundaries, 0);
  for (const auto& list : trace)
    for (const pt::ExecutedAction& e : list) {
      int k = -1;
      if (e.action.type == pt::sched::ActionType::SEND_F) k = e.action.stage;
      if (e.action.type == pt::sched::ActionType::SEND_B) k = e.action.stage - 1;
      if (k < 0 || static_cast<size_t>(k) >= boundaries) continue;
      sum[static_cast<size_t>(k)] += (e.end_us - e.start_us) * 1e-6;
      ++count[static_cast<size_t>(k)];
    }
  for (size_t k = 0; k < boundaries; ++k) sum[k] = count[k] ? sum[k] / count[k] : 0.0;
  return sum;
}

// ---- one pipeline run ---------------------------------------------------------------------------

struct Baseline {
  Spread one_core_s, threads_s;
  std::vector<double> losses;  // the 1-core reference's
};

struct RunResult {
  std::string schedule;
  int M = 0;
  Spread step_s, speedup_over_ideal;
  double predicted_over_measured = kNaN;
  double bubble_err_pp_max = 0, bubble_err_vs_sim_pp_max = 0;  // largest |error| over the devices
  double sim_equal_s = kNaN, sim_profiled_s = kNaN;
  std::vector<size_t> peak_bytes;
  std::vector<int> inflight;
  std::vector<int64_t> predicted_peak_bytes;
  int wrong = 0;
};

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// Plans, runs and reports one (schedule, M); std::nullopt when the schedule is not valid for M.
std::optional<RunResult> run_pipeline(const Flags& f, pt::CostSource cost_source,
                                      const Batch& batch, Profiles& profiles,
                                      const std::string& schedule, int M, const Baseline& base) {
  const int S = f.stages;
  pt::Model model = make_model(f.model);
  pt::PlanRequest req;
  req.devices = S;
  req.microbatches = M;
  req.batch = f.batch;
  req.schedule = pt::ScheduleChoice::parse(schedule);
  req.partition = {pt::PartitionMethod::Kind::time, {}};
  req.costs = cost_source;
  req.optimizer_slots = 1;  // SGD with momentum
  std::optional<pt::PipelinePlan> planned;
  try {
    planned = pt::make_plan(model, req, profiles.profiler());
  } catch (const pt::UsageError& e) {
    emit({{"bench", std::string("pipeline")},
          {"schedule", schedule},
          {"microbatches", int64_t{M}},
          {"skipped", std::string(e.what())}});
    return std::nullopt;
  }
  const pt::PipelinePlan& plan = *planned;

  std::vector<std::unique_ptr<pt::Backend>> owned;
  std::vector<pt::Backend*> devices;
  for (int d = 0; d < S; ++d) {
    owned.push_back(pt::make_cpu_backend(d, 1));
    devices.push_back(owned.back().get());
  }
  pt::PipelineConfig pc;
  pc.trainer = pt::bench::sgd_config(M);
  pc.schedule = plan.schedule;
  pc.layers_per_stage = plan.partition.layout();
  pc.record_trace = true;  // two timing events per action, read once per step
  pt::PipelineTrainer trainer(model, devices, pc);

  std::vector<std::vector<std::vector<pt::ExecutedAction>>> traces;  // per timed step
  std::vector<size_t> peak;
  const Timed t = time_steps(
      f.warmup, f.steps, [&] { return trainer.train_step(batch.hx, batch.hy); },
      [&] {
        traces.push_back(trainer.last_trace());
        const std::vector<size_t> step_peak = trainer.last_peak_bytes();
        peak.resize(step_peak.size(), 0);
        for (size_t d = 0; d < step_peak.size(); ++d) peak[d] = std::max(peak[d], step_peak[d]);
      });

  // ---- verify: the same losses as the single-device reference, step by step ----
  RunResult r;
  r.schedule = schedule;
  r.M = M;
  r.step_s = t.step_s;
  const auto& step_trace = traces[static_cast<size_t>(t.median_step)];
  const size_t n = std::min(t.losses.size(), base.losses.size());
  for (size_t i = 0; i < n; ++i) r.wrong += t.losses[i] != base.losses[i];

  // ---- bubble: measured on the median step vs the analytic formula ----
  const pt::BubbleStats bubble = pt::measure_bubble(pt::step_trace(step_trace, devices, 0), 0);
  // Each device's bubble: the median over the timed steps (one step's trace is noisy here).
  std::vector<std::vector<double>> bubble_each(bubble.bubble_fraction.size());
  for (const auto& traced : traces) {  // each trace measured once, for every device
    const pt::BubbleStats b = pt::measure_bubble(pt::step_trace(traced, devices, 0), 0);
    for (size_t d = 0; d < bubble_each.size(); ++d)
      bubble_each[d].push_back(b.bubble_fraction.at(d));
  }
  std::vector<double> bubble_median;
  for (std::vector<double>& each : bubble_each)
    bubble_median.push_back(pt::bench::spread_of(std::move(each)).median);
  const double analytic = pt::sched::analytic_bubble(schedule, S, M);

  // ---- the simulator with profiled per-stage F/I/W and the measured transfers ----
  const int64_t mb = (f.batch + M - 1) / M;
  const auto& costs = profiles.at(mb);
  pt::sched::SimConfig sim;
  sim.stages = stage_times(plan.partition, costs);
  const pt::sched::SimResult free_comm = pt::sched::simulate(plan.schedule, sim);
  sim.transfer = measured_transfers(step_trace, plan.schedule.num_stages);
  const pt::sched::SimResult predicted = pt::sched::simulate(plan.schedule, sim);
  const pt::sched::SimResult equal = pt::sched::simulate(plan.schedule);  // F = I = W = 1
  r.sim_equal_s = equal.step_time;
  r.sim_profiled_s = predicted.step_time;
  const double span_s = bubble.step_span_us * 1e-6;
  r.predicted_over_measured = span_s > 0 ? predicted.step_time / span_s : kNaN;

  // ---- speedup and the ideal ----
  double work_s = 0;  // what one device computes in a step: M (F + I + W) over all stages
  for (const auto& st : sim.stages) work_s += M * (st.f + st.i + st.w);
  const double ideal_sim = work_s / free_comm.step_time;
  const double ideal_analytic = S * (1.0 - analytic);  // = S·M/(M+S−1) for gpipe and 1f1b
  const bool analytic_kind = schedule == "gpipe" || schedule == "1f1b";
  const double ideal = analytic_kind ? ideal_analytic : ideal_sim;
  // The baseline's median over the pipeline's median, slowest and fastest step.
  const Spread speedup = pt::bench::rate_of(t.step_s, base.one_core_s.median);
  r.speedup_over_ideal = pt::bench::rate_of(t.step_s, base.one_core_s.median / ideal);
  r.peak_bytes = peak;
  r.inflight = equal.peak_inflight;
  for (const pt::StagePlan& st : plan.partition.stages)
    r.predicted_peak_bytes.push_back(st.peak_memory_bytes);

  std::string layout;
  for (int k : plan.partition.layout()) layout += (layout.empty() ? "" : ",") + std::to_string(k);
  Fields out{{"bench", std::string("pipeline")},
             {"schedule", schedule},
             {"microbatches", int64_t{M}},
             {"stages", int64_t{plan.schedule.num_stages}},
             {"devices", int64_t{S}},
             {"layout", layout},
             {"costs", plan.costs},
             {"reps", int64_t{t.step_s.reps}}};
  pt::bench::add_spread(out, "step_ms", t.step_s, 1e3);
  pt::bench::add_spread(out, "samples_per_s",
                        pt::bench::rate_of(t.step_s, static_cast<double>(f.batch)));
  pt::bench::add_spread(out, "speedup", speedup);
  out.emplace_back("speedup_vs_threads", base.threads_s.median / t.step_s.median);
  out.emplace_back("ideal", ideal);
  out.emplace_back("ideal_kind", std::string(analytic_kind ? "analytic" : "simulated"));
  out.emplace_back("ideal_analytic", ideal_analytic);
  out.emplace_back("ideal_simulated", ideal_sim);
  pt::bench::add_spread(out, "speedup_over_ideal", r.speedup_over_ideal);
  out.emplace_back("bubble_analytic_pct", 100 * analytic);
  for (size_t d = 0; d < bubble_median.size(); ++d) {
    const double err = 100 * (bubble_median[d] - analytic);
    const double err_sim = 100 * (bubble_median[d] - predicted.bubble_fraction[d]);
    out.emplace_back(fmt::format("bubble_pct_d{}", d), 100 * bubble_median[d]);
    out.emplace_back(fmt::format("bubble_err_pp_d{}", d), err);
    out.emplace_back(fmt::format("bubble_sim_pct_d{}", d), 100 * predicted.bubble_fraction[d]);
    out.emplace_back(fmt::format("bubble_err_vs_sim_pp_d{}", d), err_sim);
    r.bubble_err_pp_max = std::max(r.bubble_err_pp_max, std::abs(err));
    r.bubble_err_vs_sim_pp_max = std::max(r.bubble_err_vs_sim_pp_max, std::abs(err_sim));
  }
  out.emplace_back("span_ms", span_s * 1e3);
  out.emplace_back("predicted_ms", predicted.step_time * 1e3);
  out.emplace_back("predicted_over_measured", r.predicted_over_measured);
  for (size_t k = 0; k < sim.stages.size(); ++k) {
    const auto& st = sim.stages[k];
    out.emplace_back(fmt::format("stage_fiw_ms_s{}", k),
                     fmt::format("{:.3f}/{:.3f}/{:.3f}", st.f * 1e3, st.i * 1e3, st.w * 1e3));
  }
  for (size_t k = 0; k < sim.transfer.size(); ++k)
    out.emplace_back(fmt::format("transfer_us_b{}", k), sim.transfer[k] * 1e6);
  for (size_t d = 0; d < peak.size(); ++d)
    out.emplace_back(fmt::format("peak_mib_d{}", d), mib(static_cast<double>(peak[d])));
  for (size_t k = 0; k < r.inflight.size(); ++k)
    out.emplace_back(fmt::format("inflight_s{}", k), int64_t{r.inflight[k]});
  out.emplace_back("steps_checked", static_cast<int64_t>(n));
  out.emplace_back("wrong", int64_t{r.wrong});
  emit(out);
  return r;
}

const RunResult* find(const std::vector<RunResult>& runs, const std::string& schedule, int M) {
  for (const RunResult& r : runs)
    if (r.schedule == schedule && r.M == M) return &r;
  return nullptr;
}

int run(Flags f, const CLI::App& app) {
  if (f.quick) {
    if (!app.count("--microbatches")) f.microbatches = {1, 4, 8};
    if (!app.count("--steps")) f.steps = 3;
    if (!app.count("--warmup")) f.warmup = 1;
  }
  if (f.stages < 2) throw pt::UsageError(fmt::format("--stages {} must be >= 2", f.stages));
  if (f.steps < 1) throw pt::UsageError(fmt::format("--steps {} must be >= 1", f.steps));
  if (f.warmup < 0) throw pt::UsageError(fmt::format("--warmup {} must be >= 0", f.warmup));
  if (f.batch < 1) throw pt::UsageError(fmt::format("--batch {} must be >= 1", f.batch));
  for (int M : f.microbatches)
    if (M < 1 || M > f.batch)
      throw pt::UsageError(fmt::format("--microbatches {} must be in [1, --batch {}]", M, f.batch));
  for (const std::string& s : f.schedules) {
    try {
      pt::sched::analytic_bubble(s, f.stages, 1);  // the bubble needs a formula: a known name
    } catch (const std::invalid_argument& e) {
      throw pt::UsageError(fmt::format("--schedules '{}': {}", s, e.what()));
    }
  }
  const pt::CostSource costs = pt::CostSource::parse(f.costs);

  Profiles profiles(f);
  const pt::Model shown = make_model(f.model);
  const Batch batch(f.batch);
  emit({{"bench", std::string("pipeline_config")},
        {"model", f.model},
        {"layers", int64_t{shown.num_layers()}},
        {"params", shown.param_count()},
        {"batch", f.batch},
        {"devices", int64_t{f.stages}},
        {"threads_per_device", int64_t{1}},
        {"steps", int64_t{f.steps}},
        {"warmup", int64_t{f.warmup}},
        {"partition", std::string("time")},
        {"costs", f.costs}});

  std::vector<RunResult> runs;
  for (int M : f.microbatches) {
    // ---- baselines: one device, the same M micro-batches ----
    Baseline base;
    const Timed one = time_single_device(f, batch, M, 1);
    const Timed many = time_single_device(f, batch, M, f.stages);
    base.one_core_s = one.step_s;
    base.threads_s = many.step_s;
    base.losses = one.losses;
    for (const auto& [threads, t] : {std::pair{1, &one}, std::pair{f.stages, &many}}) {
      Fields out{{"bench", std::string("baseline")},
                 {"devices", int64_t{1}},
                 {"threads", int64_t{threads}},
                 {"microbatches", int64_t{M}},
                 {"reps", int64_t{t->step_s.reps}}};
      pt::bench::add_spread(out, "step_ms", t->step_s, 1e3);
      pt::bench::add_spread(out, "samples_per_s",
                            pt::bench::rate_of(t->step_s, static_cast<double>(f.batch)));
      emit(out);
    }
    // ---- the pipelines ----
    for (const std::string& s : f.schedules)
      if (auto r = run_pipeline(f, costs, batch, profiles, s, M, base))
        runs.push_back(std::move(*r));
  }

  // ---- memory at M = 8 (or the largest M run): activations held vs in-flight micro-batches ----
  const int mem_m = std::count(f.microbatches.begin(), f.microbatches.end(), 8)
                        ? 8
                        : *std::max_element(f.microbatches.begin(), f.microbatches.end());
  const RunResult* ref_1f1b = find(runs, "1f1b", mem_m);
  for (const std::string s : {"gpipe", "1f1b", "zb-h1"}) {
    const RunResult* r = find(runs, s, mem_m);
    if (!r) continue;
    Fields out{{"bench", std::string("pipeline_memory")},
               {"schedule", s},
               {"microbatches", int64_t{mem_m}}};
    for (size_t d = 0; d < r->peak_bytes.size(); ++d) {
      out.emplace_back(fmt::format("peak_mib_d{}", d), mib(static_cast<double>(r->peak_bytes[d])));
      if (ref_1f1b && d < ref_1f1b->peak_bytes.size())
        out.emplace_back(
            fmt::format("peak_over_1f1b_d{}", d),
            static_cast<double>(r->peak_bytes[d]) / static_cast<double>(ref_1f1b->peak_bytes[d]));
    }
    for (size_t k = 0; k < r->inflight.size(); ++k)
      out.emplace_back(fmt::format("inflight_s{}", k), int64_t{r->inflight[k]});
    for (size_t k = 0; k < r->predicted_peak_bytes.size(); ++k)
      out.emplace_back(fmt::format("planned_peak_mib_s{}", k),
                       mib(static_cast<double>(r->predicted_peak_bytes[k])));
    emit(out);
  }

  // ---- zb-h1 vs 1f1b ----
  for (int M : f.microbatches) {
    const RunResult* zb = find(runs, "zb-h1", M);
    const RunResult* ob = find(runs, "1f1b", M);
    if (!zb || !ob) continue;
    emit({{"bench", std::string("zb_vs_1f1b")},
          {"microbatches", int64_t{M}},
          {"sim_equal_ratio", zb->sim_equal_s / ob->sim_equal_s},
          {"sim_profiled_ratio", zb->sim_profiled_s / ob->sim_profiled_s},
          {"measured_ratio", zb->step_s.median / ob->step_s.median}});
  }

  // ---- summary ----
  double bubble_max = 0, bubble_max_1f1b = kNaN, bubble_vs_sim_max = 0, pred_min = kNaN,
         pred_max = kNaN;
  int wrong = 0;
  for (const RunResult& r : runs) {
    bubble_max = std::max(bubble_max, r.bubble_err_pp_max);
    bubble_vs_sim_max = std::max(bubble_vs_sim_max, r.bubble_err_vs_sim_pp_max);
    if (r.schedule == "1f1b")
      bubble_max_1f1b = std::isnan(bubble_max_1f1b)
                            ? r.bubble_err_pp_max
                            : std::max(bubble_max_1f1b, r.bubble_err_pp_max);
    if (std::isfinite(r.predicted_over_measured)) {
      pred_min = std::isnan(pred_min) ? r.predicted_over_measured
                                      : std::min(pred_min, r.predicted_over_measured);
      pred_max = std::isnan(pred_max) ? r.predicted_over_measured
                                      : std::max(pred_max, r.predicted_over_measured);
    }
    wrong += r.wrong;
  }
  const RunResult* ob8 = find(runs, "1f1b", 8);
  const RunResult* zb8 = find(runs, "zb-h1", 8);
  const Spread ob8_ratio = ob8 ? ob8->speedup_over_ideal : Spread{kNaN, kNaN, kNaN, 0};
  const double zb_measured = ob8 && zb8 ? zb8->step_s.median / ob8->step_s.median : kNaN;
  const double zb_sim = ob8 && zb8 ? zb8->sim_equal_s / ob8->sim_equal_s : kNaN;
  auto meets = [](bool ok, bool known) {
    return known ? int64_t{ok} : int64_t{-1};
  };  // -1: not measured
  emit({{"bench", std::string("pipeline_summary")},
        {"model", f.model},
        {"runs", static_cast<int64_t>(runs.size())},
        {"onef1b_speedup_over_ideal_m8", ob8_ratio.median},
        {"onef1b_speedup_over_ideal_m8_min", ob8_ratio.min},
        {"onef1b_speedup_over_ideal_m8_max", ob8_ratio.max},
        {"target_speedup_over_ideal", 0.95},
        {"meets_speedup", meets(ob8_ratio.median >= 0.95, ob8 != nullptr)},
        {"bubble_err_pp_max", runs.empty() ? kNaN : bubble_max},
        {"bubble_err_pp_max_1f1b", bubble_max_1f1b},
        {"bubble_err_vs_sim_pp_max", runs.empty() ? kNaN : bubble_vs_sim_max},
        {"target_bubble_err_vs_sim_pp", 3.0},
        {"meets_bubble_vs_sim", meets(bubble_vs_sim_max <= 3.0, !runs.empty())},
        {"target_bubble_err_pp", 2.0},
        {"meets_bubble", meets(bubble_max <= 2.0, !runs.empty())},
        {"predicted_over_measured_min", pred_min},
        {"predicted_over_measured_max", pred_max},
        {"meets_prediction", meets(pred_min >= 0.9 && pred_max <= 1.1, !std::isnan(pred_min))},
        {"zb_h1_over_1f1b_measured_m8", zb_measured},
        {"zb_h1_over_1f1b_sim_equal_m8", zb_sim},
        {"wrong", int64_t{wrong}}});
  if (wrong) {
    fmt::print(stderr,
               "error: {} step losses of pipelined runs differ from the single-device reference\n",
               wrong);
    return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "bench/pipeline: pipeline speedup, bubble, prediction and memory vs the ideal (JSON lines)"};
  Flags f;
  app.add_option("--model", f.model, "mlp (784-1024x4-10) or deep (784-512x8-10)")
      ->capture_default_str();
  app.add_option("--batch", f.batch, "global batch size B")->capture_default_str();
  app.add_option("--stages", f.stages, "pipeline devices S, one core each")->capture_default_str();
  app.add_option("--steps", f.steps, "timed steps per measurement (median and spread)")
      ->capture_default_str();
  app.add_option("--warmup", f.warmup, "untimed steps before timing")->capture_default_str();
  app.add_option("--microbatches", f.microbatches, "micro-batch counts M")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--schedules", f.schedules,
                 "gpipe,1f1b,zb-h1,zb-h2,interleaved:V,zbv,v-half,v-min,dualpipev")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--costs", f.costs, "layer costs for the partition: estimate | profile")
      ->capture_default_str();
  app.add_option("--profile-repeats", f.profile_repeats, "runs per layer when profiling (median)")
      ->capture_default_str();
  app.add_flag("--quick", f.quick, "smoke run: M in {1,4,8}, 3 steps, 1 warm-up (unless given)");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f, app);
  } catch (const pt::UsageError& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
