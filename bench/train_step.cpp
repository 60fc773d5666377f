// bench/train_step: how close one training step of the Fashion-MNIST MLP comes to the machine's
// GEMM limit. Prints JSON lines; compares figures measured in this one run (the machine is noisy):
//   {"bench":"sgemm", "threads":1, "n":2048, "gflops":..., "gflops_min":..., "gflops_max":...}
//   {"bench":"mlp_step", "threads":1, "batch":256, "step_ms":..., "samples_per_s":...,
//    "model_gflops":..., "ratio_to_sgemm":..., "ratio_min":..., "ratio_max":..., "reps":...}
// Each of `reps` repetitions times `steps` training steps (their median) between two sgemm calls
// (their mean), so both sides of a ratio see the same load; the figures are the medians over the
// repetitions and the spread (min, max) of the per-repetition ratios.
// With --breakdown, one line per op of the step (median ms): each layer's forward (F), input
// gradient (I) and weight gradient (W), and the epilogue's gradient norm and optimizer update
// (in place; out of place, as PipeDream-2BW's UPDATE writes into the stash; and a copy of the
// parameters, what that UPDATE did first before it stepped out of place).
// Model FLOPs per sample count GEMMs only: forward 2W, weight gradient 2W, input gradient 2W
// except for the first layer (W = weights of the linear layers).
#include <algorithm>
#include <chrono>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/positive.h"
#include "bench/repeated_seconds.h"
#include "engine/core/random.h"
#include "engine/partition/layer_costs.h"
#include "engine/train/trainer.h"
#include "engine/train/training_engine.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Median seconds of `reps` calls of `f` (after one warm-up call).
template <class F>
double median_seconds(int reps, F&& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(seconds_since(t0));
  }
  return pt::bench::spread_of(t).median;
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

// One line per op of the step: the layers' F/I/W (profile_costs: a training pass, every call
// timed) and the epilogue's passes over all parameters, on the trainer's own gradients and
// optimizer.
void print_breakdown(pt::Trainer& trainer, const pt::Model& model, pt::Backend& backend,
                     int64_t rows, int threads) {
  const auto costs = pt::profile_costs(model, backend, rows, 7);
  for (int l = 0; l < model.num_layers(); ++l) {
    const pt::LayerProfile& p = costs[static_cast<size_t>(l)];
    pt::bench::emit({{"bench", std::string("mlp_op")},
                     {"threads", int64_t{threads}},
                     {"layer", int64_t{l}},
                     {"kind", std::string(model.layer(l).kind())},
                     {"forward_ms", p.forward_s * 1e3},
                     {"backward_input_ms", p.backward_input_s * 1e3},
                     {"backward_weight_ms", p.backward_weight_s * 1e3}});
  }
  pt::StageParameters& params = trainer.parameters();
  const pt::Tensor g = params.grads_flat(), w = params.params_flat();
  const double norm_s = median_seconds(7, [&] { pt::global_grad_norm({&params}); });
  const double update_s = median_seconds(7, [&] { trainer.optimizer().step(w, g, 0.f); });
  // PipeDream-2BW's UPDATE (--update async) writes the new version into the stash: the same
  // step out of place. Before b463367 it copied the parameters there and stepped in place.
  const pt::Tensor stash = backend.empty(w.shape(), w.dtype());
  const double out_of_place_s =
      median_seconds(7, [&] { trainer.optimizer().step(w, g, stash, 0.f); });
  const double copy_s =
      median_seconds(7, [&] { backend.copy_within(stash.data(), w.data(), w.bytes()); });
  pt::bench::emit({{"bench", std::string("mlp_op")},
                   {"threads", int64_t{threads}},
                   {"kind", std::string("epilogue")},
                   {"params", g.numel()},
                   {"grad_norm_ms", norm_s * 1e3},
                   {"optimizer_ms", update_s * 1e3},
                   {"optimizer_out_of_place_ms", out_of_place_s * 1e3},
                   {"parameter_copy_ms", copy_s * 1e3}});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench/train_step: MLP training step vs the sgemm limit (JSON lines)"};
  int64_t batch = 256, n = 2048;
  int steps = 10, microbatches = 1, reps = 5;
  bool breakdown = false;
  std::vector<int> threads{1, 2};
  app.add_option("--batch", batch)->capture_default_str()->check(pt::bench::kPositive);
  app.add_option("--microbatches", microbatches)
      ->capture_default_str()
      ->check(pt::bench::kPositive);
  app.add_option("--steps", steps, "timed steps per repetition (their median counts)")
      ->capture_default_str()
      ->check(pt::bench::kPositive);
  app.add_option("--reps", reps, "repetitions of (sgemm, steps); medians and spread over them")
      ->capture_default_str()
      ->check(pt::bench::kPositive);
  app.add_option("--gemm-n", n)->capture_default_str()->check(pt::bench::kPositive);
  app.add_option("--threads", threads, "thread counts to measure")->capture_default_str();
  app.add_flag("--breakdown", breakdown, "also print the median time of each op of the step");
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
    pt::Tensor A = backend->empty({n, n}), B = backend->empty({n, n}), C = backend->zeros({n, n});
    backend->fill(A.f32(), 0.5f, n * n);
    backend->fill(B.f32(), 0.25f, n * n);
    const auto sgemm = [&] {
      backend->gemm(false, false, n, n, n, 1.f, A.f32(), n, B.f32(), n, 0.f, C.f32(), n);
      backend->synchronize();
    };
    sgemm();

    pt::Model model = pt::fashion_mlp();
    pt::TrainerConfig cfg;
    cfg.microbatches = microbatches;
    cfg.optimizer.kind = "sgd";
    cfg.optimizer.lr = 0.01f;
    cfg.lr = {pt::LrSchedule::Kind::constant, 0.01f, 0, 0, 0.f};
    pt::Trainer trainer(model, *backend, cfg);
    for (int i = 0; i < 3; ++i) trainer.train_step(hx, hy);  // warm caches and primitives

    const double flops_per_step = static_cast<double>(batch) * mlp_gemm_flops_per_sample(model);
    std::vector<double> limits, step_s, ratios;
    for (int r = 0; r < reps; ++r) {
      // The sgemm before and after the steps, averaged: a load that changes during the steps
      // weighs on both sides of the ratio.
      const auto t0 = Clock::now();
      sgemm();
      const double before = seconds_since(t0);
      std::vector<double> s;
      for (int i = 0; i < steps; ++i) {
        const auto t1 = Clock::now();
        trainer.train_step(hx, hy);
        s.push_back(seconds_since(t1));
      }
      const auto t2 = Clock::now();
      sgemm();
      const double after = seconds_since(t2);
      const double limit = 2.0 * static_cast<double>(n * n * n) / ((before + after) / 2) / 1e9;
      const double step = pt::bench::spread_of(s).median;
      limits.push_back(limit);
      step_s.push_back(step);
      ratios.push_back(flops_per_step / step / 1e9 / limit);
    }
    const pt::bench::Spread lim = pt::bench::spread_of(limits), st = pt::bench::spread_of(step_s),
                            ra = pt::bench::spread_of(ratios);
    pt::bench::emit({{"bench", std::string("sgemm")},
                     {"threads", int64_t{t}},
                     {"n", n},
                     {"gflops", lim.median},
                     {"gflops_min", lim.min},
                     {"gflops_max", lim.max}});
    pt::bench::emit({{"bench", std::string("mlp_step")},
                     {"threads", int64_t{t}},
                     {"batch", batch},
                     {"microbatches", int64_t{microbatches}},
                     {"step_ms", st.median * 1e3},
                     {"step_ms_min", st.min * 1e3},
                     {"step_ms_max", st.max * 1e3},
                     {"samples_per_s", static_cast<double>(batch) / st.median},
                     {"model_gflops", flops_per_step / st.median / 1e9},
                     {"sgemm_gflops", lim.median},
                     {"ratio_to_sgemm", ra.median},
                     {"ratio_min", ra.min},
                     {"ratio_max", ra.max},
                     {"reps", int64_t{reps}}});
    if (breakdown) print_breakdown(trainer, model, *backend, batch / microbatches, t);
  }
  return 0;
}
