// One measurement of bench/pipeline (see pipeline_run.h): the timing of steps, the profiled
// costs the simulator is given, and run_pipeline, which plans, times, verifies and prints one
// (schedule, M).
#include "bench/pipeline_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "bench/json_line.h"
#include "engine/core/error.h"
#include "engine/partition/on_every_device.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "engine/pipeline/step_trace.h"
#include "engine/plan/plan.h"
#include "engine/trace/bubble.h"
#include "engine/trace/trace.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"
#include "schedule/simulate.h"

namespace pt::bench::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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

}  // namespace

pt::Model make_model(const std::string& name) {
  if (name == "mlp") return pt::fashion_mlp();      // 784-1024x4-10: 10 layers
  if (name == "deep") return pt::deep_mlp(8, 512);  // 784-512x8-10: 18 layers
  throw pt::UsageError(fmt::format("unknown --model '{}': use mlp or deep", name));
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

Profiles::Profiles(const Flags& f) : flags_(f) {
  for (int d = 0; d < std::max(f.stages, 1); ++d) {
    owned_.push_back(pt::make_cpu_backend(d, 1));
    devices_.push_back(owned_.back().get());
  }
}

const std::vector<pt::LayerProfile>& Profiles::at(int64_t microbatch) {
  auto it = cache_.find(microbatch);
  if (it != cache_.end()) return it->second;
  auto costs = pt::profile_costs_together([&] { return make_model(flags_.model); }, devices_,
                                          microbatch, flags_.profile_repeats);
  return cache_.emplace(microbatch, std::move(costs)).first->second;
}

pt::LayerProfiler Profiles::profiler() {
  return {[this](int64_t microbatch) { return at(microbatch); },
          pt::every_device_at_once(devices_)};
}

namespace {

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

}  // namespace

// ---- one pipeline run ---------------------------------------------------------------------------

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

}  // namespace pt::bench::pipeline
