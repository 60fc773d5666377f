// bench/train_step: how close one training step of the Fashion-MNIST MLP comes to the machine's
// GEMM limit. Prints JSON lines; compares figures measured in this one run (the machine is noisy):
//   {"bench":"sgemm", "threads":1, "n":2048, "gflops":...}                      the limit
//   {"bench":"mlp_step", "threads":1, "batch":256, "samples_per_s":..., "model_gflops":...,
//    "ratio_to_sgemm":...}
// Model FLOPs per sample count GEMMs only: forward 2W, weight gradient 2W, input gradient 2W
// except for the first layer (W = weights of the linear layers).
#include <algorithm>
#include <chrono>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "engine/core/random.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Best of `reps` timings of `f` (after one warm-up call): the least disturbed measurement.
template <class F>
double best_seconds(int reps, F&& f) {
  f();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

double sgemm_gflops(pt::Backend& b, int64_t n, int reps) {
  pt::Tensor A = b.empty({n, n}), B = b.empty({n, n}), C = b.zeros({n, n});
  b.fill(A.f32(), 0.5f, n * n);
  b.fill(B.f32(), 0.25f, n * n);
  const double s = best_seconds(reps, [&] {
    b.gemm(false, false, n, n, n, 1.f, A.f32(), n, B.f32(), n, 0.f, C.f32(), n);
    b.synchronize();
  });
  return 2.0 * static_cast<double>(n * n * n) / s / 1e9;
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
  int steps = 20, microbatches = 1;
  std::vector<int> threads{1, 2};
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--microbatches", microbatches)->capture_default_str();
  app.add_option("--steps", steps, "timed steps per measurement")->capture_default_str();
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
    const double limit = sgemm_gflops(*backend, n, 5);
    pt::bench::emit(
        {{"bench", std::string("sgemm")}, {"threads", int64_t{t}}, {"n", n}, {"gflops", limit}});

    pt::Model model = pt::fashion_mlp();
    pt::TrainerConfig cfg;
    cfg.microbatches = microbatches;
    cfg.optimizer.kind = "sgd";
    cfg.optimizer.lr = 0.01f;
    cfg.lr = {pt::LrSchedule::Kind::constant, 0.01f, 0, 0, 0.f};
    pt::Trainer trainer(model, *backend, cfg);
    for (int i = 0; i < 3; ++i) trainer.train_step(hx, hy);  // warm caches and primitives
    double best = 1e30;
    for (int i = 0; i < steps; ++i) {
      const auto t0 = Clock::now();
      trainer.train_step(hx, hy);
      best = std::min(best, seconds_since(t0));
    }
    const double sps = static_cast<double>(batch) / best;
    const double gflops = sps * mlp_gemm_flops_per_sample(model) / 1e9;
    pt::bench::emit({{"bench", std::string("mlp_step")},
                     {"threads", int64_t{t}},
                     {"batch", batch},
                     {"microbatches", int64_t{microbatches}},
                     {"step_ms", best * 1e3},
                     {"samples_per_s", sps},
                     {"model_gflops", gflops},
                     {"sgemm_gflops", limit},
                     {"ratio_to_sgemm", gflops / limit}});
  }
  return 0;
}
