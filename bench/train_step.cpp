// bench/train_step: how close one training step of the Fashion-MNIST MLP comes to the machine's
// GEMM limit. Prints JSON lines; compares figures measured in this one run (the machine is noisy):
//   {"bench":"sgemm", "threads":1, "n":2048, "gflops", "gflops_min", "gflops_max", "reps"}
//   {"bench":"mlp_step", "threads":1, "batch":256, "step_ms", "step_ms_min", "step_ms_max",
//    "samples_per_s" (+ _min, _max), "model_gflops", "ratio_to_sgemm" (+ _min, _max), "reps"}
// Every figure is the median of the timed repetitions with its spread (bench/repeated_seconds.h:
// _max of a rate is the old best-of-N figure); ratio_to_sgemm = median step's model GFLOP/s over
// the median sgemm rate, its _min and _max from the slowest and fastest step.
// Model FLOPs per sample count GEMMs only: forward 2W, weight gradient 2W, input gradient 2W
// except for the first layer (W = weights of the linear layers).
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/repeated_seconds.h"
#include "engine/core/random.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"

namespace {

using pt::bench::Spread;

// GFLOP/s of an n x n x n sgemm: the median of `reps` calls after one warm-up, with its spread.
Spread sgemm_gflops(pt::Backend& b, int64_t n, int reps) {
  pt::Tensor A = b.empty({n, n}), B = b.empty({n, n}), C = b.zeros({n, n});
  b.fill(A.f32(), 0.5f, n * n);
  b.fill(B.f32(), 0.25f, n * n);
  const Spread s = pt::bench::spread_of(pt::bench::repeated_seconds(1, reps, [&] {
    b.gemm(false, false, n, n, n, 1.f, A.f32(), n, B.f32(), n, 0.f, C.f32(), n);
    b.synchronize();
  }));
  return pt::bench::rate_of(s, 2.0 * static_cast<double>(n * n * n) / 1e9);
}

double mlp_gemm_flops_per_sample(const pt::Model& m) {
  double w_first = -1, w_all = 0;
  for (int l = 0; l < m.num_layers(); ++l) {
    if (m.layer(l).kind() != "linear") continue;
    const auto specs = m.layer(l).param_specs();
    const double w = static_cast<double>(specs[0].shape.numel());
    if (w_first < 0) w_first = w;
    w_all += w;
  }
  return 2 * w_all + 2 * w_all + 2 * (w_all - w_first);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench/train_step: MLP training step vs the sgemm limit (JSON lines)"};
  int64_t batch = 256, n = 2048;
  int steps = 20, microbatches = 1, sgemm_reps = 5;
  std::vector<int> threads{1, 2};
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--microbatches", microbatches)->capture_default_str();
  app.add_option("--steps", steps, "timed steps per measurement (median and spread)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--sgemm-reps", sgemm_reps, "timed sgemm calls (median and spread)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--gemm-n", n)->capture_default_str();
  app.add_option("--threads", threads, "thread counts to measure")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // Synthetic inputs: the speed does not depend on the values.
  std::vector<float> x(static_cast<size_t>(batch * 784));
  std::vector<int32_t> y(static_cast<size_t>(batch));
  pt::CounterRng rng(1);
  for (auto& v : x) v = static_cast<float>(rng.next_double());
  for (auto& v : y) v = static_cast<int32_t>(rng.next_below(10));
  const pt::Tensor hx = pt::Tensor::borrow(x.data(), {batch, 1, 28, 28});
  const pt::Tensor hy = pt::Tensor::borrow(y.data(), {batch}, pt::DType::i32);

  for (int t : threads) {
    auto backend = pt::make_cpu_backend(0, t);
    backend->bind_current_thread();
    const Spread limit = sgemm_gflops(*backend, n, sgemm_reps);
    pt::bench::Fields line{{"bench", std::string("sgemm")}, {"threads", int64_t{t}}, {"n", n}};
    pt::bench::add_spread(line, "gflops", limit);
    line.emplace_back("reps", int64_t{limit.reps});
    pt::bench::emit(line);

    pt::Model model = pt::fashion_mlp();
    pt::TrainerConfig cfg;
    cfg.microbatches = microbatches;
    cfg.optimizer.kind = "sgd";
    cfg.optimizer.lr = 0.01f;
    cfg.lr = {pt::LrSchedule::Kind::constant, 0.01f, 0, 0, 0.f};
    pt::Trainer trainer(model, *backend, cfg);
    // 3 warm-up steps: caches and primitives.
    const Spread step = pt::bench::spread_of(
        pt::bench::repeated_seconds(3, steps, [&] { trainer.train_step(hx, hy); }));
    const Spread sps = pt::bench::rate_of(step, static_cast<double>(batch));
    const Spread gflops = pt::bench::rate_of(
        step, static_cast<double>(batch) * mlp_gemm_flops_per_sample(model) / 1e9);
    pt::bench::Fields out{{"bench", std::string("mlp_step")},
                          {"threads", int64_t{t}},
                          {"batch", batch},
                          {"microbatches", int64_t{microbatches}}};
    pt::bench::add_spread(out, "step_ms", step, 1e3);
    pt::bench::add_spread(out, "samples_per_s", sps);
    pt::bench::add_spread(out, "model_gflops", gflops);
    out.emplace_back("sgemm_gflops", limit.median);
    pt::bench::add_spread(out, "ratio_to_sgemm", gflops, 1.0 / limit.median);
    out.emplace_back("reps", int64_t{step.reps});
    pt::bench::emit(out);
  }
  return 0;
}
