// bench/gpt: training throughput of the GPT example's model (gpt(256, 128, 256, 4, 4), batch 16,
// AdamW) against the machine's GEMM limit, all measured in this one run. Prints JSON lines:
//   {"bench":"sgemm", "threads", "gflops" (+ _min, _max), "reps"}           the limit
//   {"bench":"gpt_step", "setup":"1 device x T threads" | "2 stages x 1 thread (1f1b, M=4)",
//    "cores", "step_ms", "tokens_per_s", "model_gflops", "ratio_to_sgemm" (each + _min, _max),
//    "reps"}
//   {"bench":"gpt_step_cpu", "setup":"1 device x 1 thread", "sgemm_cpu_gflops",
//    "step_cpu_ms_median", "step_cpu_ms_min", "step_cpu_ms_max", "reps", "ratio_to_sgemm_cpu"}
//    the same 1-thread ratio in CPU seconds (medians of >= 5 repetitions): on a machine whose
//    other core is busy, wall-time ratios move with the load between the sgemm and the steps;
//    these do not.
// Model FLOPs per token follow PaLM's accounting: 6 N + 12 L d T, N = the parameters that take
// part in matrix products (all but the two embedding tables, the tied LM head counted once),
// attention counted in full (not halved for the causal mask). Each figure is the median of
// --steps timed steps (after one warm-up) with its spread (bench/repeated_seconds.h); the ratio
// divides by the median sgemm rate.
#include <algorithm>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/best_seconds.h"  // process_cpu_seconds
#include "bench/json_line.h"
#include "bench/positive.h"
#include "bench/repeated_seconds.h"
#include "engine/core/random.h"
#include "engine/data/batching.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"

namespace {

using pt::bench::Spread;
constexpr int64_t kVocab = 256, kContext = 128, kDModel = 256, kBatch = 16;
constexpr int kLayers = 4, kHeads = 4;

pt::Model model() { return pt::gpt(kVocab, kContext, kDModel, kLayers, kHeads); }

double flops_per_token(const pt::Model& m) {
  const double n =
      static_cast<double>(m.param_count() - kVocab * kDModel /*lm_head copy*/ - kContext * kDModel);
  return 6.0 * n + 12.0 * kLayers * kDModel * kContext;
}

pt::TrainerConfig trainer_config(int M) {
  pt::TrainerConfig c;
  c.microbatches = M;
  c.optimizer.kind = "adamw";
  c.optimizer.lr = 3e-4f;
  c.lr = {pt::LrSchedule::Kind::constant, 3e-4f, 0, 0, 0.f};
  return c;
}

// Median of 5 calls after one warm-up, with the spread.
Spread sgemm_gflops(pt::Backend& b, int64_t n) {
  pt::Tensor A = b.empty({n, n}), B = b.empty({n, n}), C = b.zeros({n, n});
  b.fill(A.f32(), 0.5f, n * n);
  b.fill(B.f32(), 0.25f, n * n);
  const Spread s = pt::bench::spread_of(pt::bench::repeated_seconds(1, 5, [&] {
    b.gemm(false, false, n, n, n, 1.f, A.f32(), n, B.f32(), n, 0.f, C.f32(), n);
    b.synchronize();
  }));
  return pt::bench::rate_of(s, 2.0 * static_cast<double>(n * n * n) / 1e9);
}

// `step_s`: the timed steps' seconds; `limit`: the sgemm rate (its median is the divisor).
void report(const std::string& setup, int cores, const std::vector<double>& step_s,
            double flops_token, const Spread& limit) {
  const Spread step = pt::bench::spread_of(step_s);
  const double tokens_per_step = static_cast<double>(kBatch * kContext);
  const Spread gflops = pt::bench::rate_of(step, tokens_per_step * flops_token / 1e9);
  pt::bench::Fields out{
      {"bench", std::string("gpt_step")}, {"setup", setup}, {"cores", int64_t{cores}}};
  pt::bench::add_spread(out, "step_ms", step, 1e3);
  pt::bench::add_spread(out, "tokens_per_s", pt::bench::rate_of(step, tokens_per_step));
  pt::bench::add_spread(out, "model_gflops", gflops);
  out.emplace_back("sgemm_gflops", limit.median);
  pt::bench::add_spread(out, "ratio_to_sgemm", gflops, 1.0 / limit.median);
  out.emplace_back("reps", int64_t{step.reps});
  pt::bench::emit(out);
}

// The 1-thread ratio in CPU seconds: the median sgemm rate and the median step over `reps`.
void report_cpu(pt::Backend& b, pt::Trainer& trainer, const pt::Tensor& hx, const pt::Tensor& hy,
                int reps, double flops_token) {
  using pt::bench::process_cpu_seconds;
  constexpr int64_t n = 2048;
  pt::Tensor A = b.empty({n, n}), B = b.empty({n, n}), C = b.zeros({n, n});
  b.fill(A.f32(), 0.5f, n * n);
  b.fill(B.f32(), 0.25f, n * n);
  std::vector<double> gemm_rates, steps;
  for (int r = 0; r < reps; ++r) {
    double t0 = process_cpu_seconds();
    b.gemm(false, false, n, n, n, 1.f, A.f32(), n, B.f32(), n, 0.f, C.f32(), n);
    gemm_rates.push_back(2.0 * static_cast<double>(n * n * n) / (process_cpu_seconds() - t0) / 1e9);
    t0 = process_cpu_seconds();
    trainer.train_step(hx, hy);  // alternated with the sgemm so load changes hit both alike
    steps.push_back(process_cpu_seconds() - t0);
  }
  const pt::bench::Spread limit = pt::bench::spread_of(gemm_rates),
                          step = pt::bench::spread_of(steps);
  const double gflops = static_cast<double>(kBatch * kContext) / step.median * flops_token / 1e9;
  pt::bench::emit({{"bench", std::string("gpt_step_cpu")},
                   {"setup", std::string("1 device x 1 thread")},
                   {"sgemm_cpu_gflops", limit.median},
                   {"step_cpu_ms_median", step.median * 1e3},
                   {"step_cpu_ms_min", step.min * 1e3},
                   {"step_cpu_ms_max", step.max * 1e3},
                   {"reps", int64_t{step.reps}},
                   {"ratio_to_sgemm_cpu", gflops / limit.median}});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench/gpt: GPT training tokens/s and model FLOP/s vs the sgemm limit (JSON lines)"};
  int steps = 5;
  app.add_option("--steps", steps, "timed steps per measurement (median and spread)")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::vector<int32_t> x(static_cast<size_t>(kBatch * kContext)), y(x.size());
  pt::CounterRng rng(1);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>(rng.next_below(kVocab));
    y[i] = static_cast<int32_t>(rng.next_below(kVocab));
  }
  const pt::Tensor hx = pt::Tensor::borrow(x.data(), {kBatch, kContext}, pt::DType::i32);
  const pt::Tensor hy = pt::Tensor::borrow(y.data(), {kBatch, kContext}, pt::DType::i32);
  const double fpt = flops_per_token(model());

  Spread limit2;
  for (int t : {1, 2}) {
    auto backend = pt::make_cpu_backend(0, t);
    backend->bind_current_thread();
    const Spread limit = sgemm_gflops(*backend, 2048);
    if (t == 2) limit2 = limit;
    pt::bench::Fields line{{"bench", std::string("sgemm")}, {"threads", int64_t{t}}};
    pt::bench::add_spread(line, "gflops", limit);
    line.emplace_back("reps", int64_t{limit.reps});
    pt::bench::emit(line);
    pt::Model m = model();
    pt::Trainer trainer(m, *backend, trainer_config(1));
    report(fmt::format("1 device x {} thread{}", t, t == 1 ? "" : "s"), t,
           pt::bench::repeated_seconds(1, steps, [&] { trainer.train_step(hx, hy); }), fpt, limit);
    if (t == 1) report_cpu(*backend, trainer, hx, hy, std::max(steps, 5), fpt);
  }
  // Two stages of one core each (the limit: two cores' sgemm, as the 2-thread figure).
  std::vector<std::unique_ptr<pt::Backend>> owned;
  std::vector<pt::Backend*> devices;
  for (int d = 0; d < 2; ++d) {
    owned.push_back(pt::make_cpu_backend(d, 1));
    devices.push_back(owned.back().get());
  }
  pt::Model m = model();
  pt::PipelineConfig pc;
  pc.trainer = trainer_config(4);
  pc.schedule = pt::sched::add_communication(pt::sched::generate("1f1b", 2, 4));
  pc.layers_per_stage = {4, 4};  // tok_emb pos_emb block0 block1 | block2 block3 ln_f lm_head
  pt::PipelineTrainer pipeline(m, devices, pc);
  report("2 stages x 1 thread (1f1b, M=4)", 2,
         pt::bench::repeated_seconds(1, steps, [&] { pipeline.train_step(hx, hy); }), fpt, limit2);
  return 0;
}
