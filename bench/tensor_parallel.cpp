// bench/tensor_parallel: tensor parallelism (--tp) on this machine's cores for the GPT, and the
// bytes its groups move per training step against the formula (issue 34). One process, virtual
// CPU devices, AdamW, no clipping; by default the shape of bench/gpt and the README's GPT row:
// gpt(vocab 256, context 128, d_model 256, 4 layers, 4 heads), batch 16, M = 1, S = 1, R = 1.
//
// ---- throughput -------------------------------------------------------------------------------
// Six setups, each built by make_local_data_parallel (R = 1, S = 1) and run the same way:
//   "TP=1, 1 device x 1 thread"    T = 1 on one 1-thread device
//   "TP=2, 2 devices x 1 thread"   T = 2, each rank a 1-thread device (rank t: heads, MLP
//                                  columns/rows and vocabulary rows t of 2)
//   "TP=2 + sequence parallel, ..." the same with --sequence-parallel (Korthikanti et al. 2022;
//                                  pipetrain-gpt's default with --tp)
//   "TP=1, 1 device x 2 threads"   T = 1, the reference: the same two cores as intra-op threads
//   "TP=2 [+ sequence parallel], overlap off, ..."  the T = 2 setups with --tp-overlap off: each
//                                  collective runs where it is called (the ratio of the two is
//                                  what overlapping the input gradient's collective with the
//                                  weight gradients buys)
// After --warmup steps each, --steps rounds; a round times one step of every setup in turn, so
// a change in the machine's load hits all of them alike. Prints per setup
//   {"bench":"tensor_parallel_step", "setup", "tp", "sequence_parallel", "tp_overlap", "devices",
//    "threads_per_device", "cores", "step_ms", "tokens_per_s" (each + _min, _max), "reps"}
// and the ratios measured in this run, each round's ratio of step times (median and spread):
//   {"bench":"tensor_parallel_ratio", "setup", "baseline", "speedup" (+ _min, _max),
//    "speedup_of_medians", "reps"}     speedup = baseline's step time / setup's (tokens/s ratio)
//
// ---- communication volume: tensor_parallel_bytes.cpp (two more T = 2 runs, counted, against
// the formula; its lines come before the timed rounds).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/positive.h"
#include "bench/repeated_seconds.h"
#include "bench/tensor_parallel_bytes.h"
#include "bench/tensor_parallel_common.h"
#include "engine/replicas/data_parallel_trainer.h"
#include "kernels/cpu/cpu_backend.h"

namespace {

using pt::bench::Batch;
using pt::bench::Flags;
using pt::bench::make_batch;
using pt::bench::make_model;
using pt::bench::pipeline_config;
using pt::bench::report_bytes;
using pt::bench::Spread;
using Clock = std::chrono::steady_clock;

}  // namespace

// ---- the timed setups ------------------------------------------------------------------------

struct Setup {
  std::string name;
  int tp = 1, devices = 1, threads = 1;
  bool sequence_parallel = false;
  bool overlap = true;  // --tp-overlap
  std::vector<std::unique_ptr<pt::Backend>> owned;
  std::unique_ptr<pt::DataParallelTrainer> trainer;
  double first_loss = 0;
  std::vector<double> step_s;  // one per round
};

void report_step(const Flags& f, const Setup& s) {
  const Spread step = pt::bench::spread_of(s.step_s);
  pt::bench::Fields out{{"bench", std::string("tensor_parallel_step")},
                        {"setup", s.name},
                        {"tp", int64_t{s.tp}},
                        {"sequence_parallel", int64_t{s.sequence_parallel}},
                        {"tp_overlap", int64_t{s.tp > 1 && s.overlap}},
                        {"devices", int64_t{s.devices}},
                        {"threads_per_device", int64_t{s.threads}},
                        {"cores", int64_t{s.devices * s.threads}}};
  pt::bench::add_spread(out, "step_ms", step, 1e3);
  pt::bench::add_spread(out, "tokens_per_s",
                        pt::bench::rate_of(step, static_cast<double>(f.batch * f.context)));
  out.emplace_back("reps", int64_t{step.reps});
  pt::bench::emit(out);
}

// Each round's baseline step time over the setup's (the speedup in tokens/s), median and spread.
void report_ratio(const Setup& s, const Setup& baseline) {
  std::vector<double> r;
  for (size_t i = 0; i < s.step_s.size(); ++i) r.push_back(baseline.step_s[i] / s.step_s[i]);
  const Spread ratio = pt::bench::spread_of(r);
  pt::bench::Fields out{{"bench", std::string("tensor_parallel_ratio")},
                        {"setup", s.name},
                        {"baseline", baseline.name}};
  pt::bench::add_spread(out, "speedup", ratio);
  out.emplace_back("speedup_of_medians", pt::bench::spread_of(baseline.step_s).median /
                                             pt::bench::spread_of(s.step_s).median);
  out.emplace_back("reps", int64_t{ratio.reps});
  pt::bench::emit(out);
}

int main(int argc, char** argv) {
  CLI::App app{
      "bench/tensor_parallel: GPT tokens/s at --tp 2 vs 1 on CPU devices, and the "
      "tensor-parallel bytes per step vs the formula (JSON lines)"};
  Flags f;
  app.add_option("--vocab", f.vocab)->check(pt::bench::kPositive)->capture_default_str();
  app.add_option("--context", f.context)->check(pt::bench::kPositive)->capture_default_str();
  app.add_option("--d-model", f.d_model)->check(pt::bench::kPositive)->capture_default_str();
  app.add_option("--layers", f.layers)->check(pt::bench::kPositive)->capture_default_str();
  app.add_option("--heads", f.heads, "divisible by 2 (--tp 2)")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
  app.add_option("--batch", f.batch, "sequences per step")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
  app.add_option("--microbatches", f.microbatches, "M, dividing --batch")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
  app.add_option("--steps", f.steps, "timed rounds (one step of each setup per round)")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
  app.add_option("--warmup", f.warmup, "untimed steps of each setup first (at least 1)")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
  app.add_option("--count-steps", f.count_steps, "steps whose bytes are counted")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (f.batch % f.microbatches != 0) {
    fmt::print(stderr, "--microbatches {} must divide --batch {}\n", f.microbatches, f.batch);
    return 2;
  }

  const Batch batch = make_batch(f);
  const pt::Model whole = make_model(f);
  pt::bench::emit(
      {{"bench", std::string("tensor_parallel_config")},
       {"model", fmt::format("gpt(vocab {}, context {}, d_model {}, {} layers, {} heads)", f.vocab,
                             f.context, f.d_model, f.layers, f.heads)},
       {"params", whole.param_count()},
       {"batch", f.batch},
       {"microbatches", int64_t{f.microbatches}},
       {"tokens_per_step", f.batch * f.context},
       {"optimizer", std::string("adamw")},
       {"schedule", std::string("1f1b, 1 stage, 1 replica")}});

  std::vector<std::unique_ptr<Setup>> setups;
  const auto add = [&](std::string name, int tp, int devices, int threads, bool sp,
                       bool overlap = true) {
    auto s = std::make_unique<Setup>();
    s->name = std::move(name);
    s->tp = tp;
    s->devices = devices;
    s->threads = threads;
    std::vector<pt::Backend*> list;
    for (int d = 0; d < devices; ++d) {
      s->owned.push_back(pt::make_cpu_backend(d, threads));
      list.push_back(s->owned.back().get());
    }
    s->sequence_parallel = sp;
    s->overlap = overlap;
    s->trainer = pt::make_local_data_parallel([&] { return make_model(f); }, list,
                                              pipeline_config(f, sp, overlap), 1, tp);
    setups.push_back(std::move(s));
  };
  add("TP=1, 1 device x 1 thread", 1, 1, 1, false);
  add("TP=2, 2 devices x 1 thread", 2, 2, 1, false);
  add("TP=2 + sequence parallel, 2 devices x 1 thread", 2, 2, 1, true);
  add("TP=1, 1 device x 2 threads", 1, 1, 2, false);
  add("TP=2, overlap off, 2 devices x 1 thread", 2, 2, 1, false, false);
  add("TP=2 + sequence parallel, overlap off, 2 devices x 1 thread", 2, 2, 1, true, false);
  Setup &tp1 = *setups[0], &tp2 = *setups[1], &tp2_sp = *setups[2], &threads2 = *setups[3],
        &tp2_off = *setups[4], &tp2_sp_off = *setups[5];

  // Verify first: the first step's loss of each setup (the same model and batch), and the
  // counted runs'.
  for (auto& s : setups) s->first_loss = s->trainer->train_step(batch.x, batch.y).loss;
  const double counted = report_bytes(f, batch, false, tp2.first_loss);
  const double counted_sp = report_bytes(f, batch, true, tp2_sp.first_loss);
  const auto relative = [&](double loss) {
    return std::abs(loss - tp1.first_loss) / std::abs(tp1.first_loss);
  };
  pt::bench::emit({{"bench", std::string("tensor_parallel_check")},
                   {"loss_tp1", tp1.first_loss},
                   {"loss_tp1_2_threads", threads2.first_loss},
                   {"loss_tp2", tp2.first_loss},
                   {"loss_tp2_counted", counted},
                   {"loss_tp2_sp", tp2_sp.first_loss},
                   {"loss_tp2_sp_counted", counted_sp},
                   {"tp2_vs_tp1_relative", relative(tp2.first_loss)},
                   {"overlap_changes_no_bit", int64_t{tp2_off.first_loss == tp2.first_loss &&
                                                      tp2_sp_off.first_loss == tp2_sp.first_loss}},
                   {"tp2_sp_vs_tp1_relative", relative(tp2_sp.first_loss)}});

  for (int k = 1; k < f.warmup; ++k)
    for (auto& s : setups) s->trainer->train_step(batch.x, batch.y);
  for (int r = 0; r < f.steps; ++r)
    for (auto& s : setups) {
      const auto t0 = Clock::now();
      s->trainer->train_step(batch.x, batch.y);
      s->step_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  for (const auto& s : setups) report_step(f, *s);
  report_ratio(tp2, tp1);
  report_ratio(tp2, threads2);
  report_ratio(tp2_sp, tp1);
  report_ratio(tp2_sp, tp2);
  report_ratio(threads2, tp1);
  report_ratio(tp2, tp2_off);
  report_ratio(tp2_sp, tp2_sp_off);
  return 0;
}
