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
//
// This file: the flags, the baselines and the loop over (schedule, M), then the memory, zb-h1 vs
// 1f1b and summary lines; one (schedule, M) is measured by run_pipeline (pipeline_run.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/pipeline_run.h"
#include "bench/repeated_seconds.h"
#include "bench/synthetic_batch.h"
#include "engine/core/error.h"
#include "engine/partition/cost_source.h"
#include "schedule/simulate.h"

namespace pt::bench::pipeline {
namespace {

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
}  // namespace pt::bench::pipeline

int main(int argc, char** argv) {
  CLI::App app{
      "bench/pipeline: pipeline speedup, bubble, prediction and memory vs the ideal (JSON lines)"};
  pt::bench::pipeline::Flags f;
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
    return pt::bench::pipeline::run(f, app);
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
