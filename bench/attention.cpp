// bench/attention: the CPU causal attention kernel alone (attention_forward + attention_backward)
// at the GPT bench's shape (batch 16, context 128, 4 heads of 64), one thread by default.
// Prints one JSON line:
//   {"bench":"attention", "B", "T", "H", "Dh", "threads", "fwd_ms_median", "bwd_ms_median",
//    "gflops_median", "gflops_min", "gflops_max", "gflops_cpu_median", "reps"}
// FLOPs are the causal ones the kernel must do: forward 2 products (q k, p v) and backward 5
// (q k again, dout v, p dout, ds q, ds k), each 2 Dh FLOPs per (query, key) pair with key <=
// query, so T (T + 1) / 2 pairs per head. One repetition times `--iters` fwd+bwd calls; the
// figures are the median and range over `--reps` repetitions (a loaded machine shows as spread).
// gflops_cpu_median divides by the process's CPU time instead of wall time: on a machine whose
// other cores are busy it shows what the kernel does when it runs (threads = 1: one core's rate).
#include <chrono>
#include <cmath>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/best_seconds.h"
#include "bench/json_line.h"
#include "bench/positive.h"
#include "bench/repeated_seconds.h"
#include "engine/core/random.h"
#include "kernels/cpu/cpu_backend.h"

int main(int argc, char** argv) {
  CLI::App app{"bench/attention: causal attention forward+backward GFLOP/s (JSON line)"};
  int64_t B = 16, T = 128, H = 4, Dh = 64;
  int threads = 1, reps = 7, iters = 20;
  app.add_option("--batch", B, "batch size")->capture_default_str()->check(pt::bench::kPositive);
  app.add_option("--context", T, "sequence length")
      ->capture_default_str()
      ->check(pt::bench::kPositive);
  app.add_option("--heads", H, "heads")->capture_default_str()->check(pt::bench::kPositive);
  app.add_option("--head-size", Dh, "head size")
      ->capture_default_str()
      ->check(pt::bench::kPositive);
  app.add_option("--threads", threads, "threads")
      ->capture_default_str()
      ->check(pt::bench::kPositive);
  app.add_option("--reps", reps, "timed repetitions (median and range reported)")
      ->capture_default_str()
      ->check(CLI::Range(5, 1000));
  app.add_option("--iters", iters, "fwd+bwd calls per repetition")
      ->capture_default_str()
      ->check(pt::bench::kPositive);
  CLI11_PARSE(app, argc, argv);

  auto be = pt::make_cpu_backend(0, threads);
  be->bind_current_thread();
  const int64_t d = H * Dh;
  std::vector<float> qkv(static_cast<size_t>(B * T * 3 * d)), dout(static_cast<size_t>(B * T * d));
  pt::CounterRng rng(7);
  for (float& x : qkv) x = static_cast<float>(2.0 * rng.next_double() - 1.0);
  for (float& x : dout) x = static_cast<float>(2.0 * rng.next_double() - 1.0);
  pt::Tensor tq = be->empty({B * T * 3 * d}), tdo = be->empty({B * T * d});
  pt::Tensor out = be->empty({B * T * d}), lse = be->empty({B * H * T}),
             dqkv = be->empty({B * T * 3 * d});
  be->copy_from_host(tq.f32(), qkv.data(), qkv.size() * sizeof(float));
  be->copy_from_host(tdo.f32(), dout.data(), dout.size() * sizeof(float));
  const float scale = 1.f / std::sqrt(static_cast<float>(Dh));

  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  std::vector<double> fwd, bwd, rate, cpu_rate;
  const double pairs = static_cast<double>(B * H) * static_cast<double>(T * (T + 1) / 2);
  const double flops = 7.0 * 2.0 * static_cast<double>(Dh) * pairs;
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
    double f = 0, g = 0;
    const double c0 = pt::bench::process_cpu_seconds();
    for (int i = 0; i < iters; ++i) {
      const auto t0 = Clock::now();
      be->attention_forward(tq.f32(), out.f32(), lse.f32(), B, T, H, Dh, scale);
      const auto t1 = Clock::now();
      be->attention_backward(tq.f32(), out.f32(), tdo.f32(), lse.f32(), dqkv.f32(), B, T, H, Dh,
                             scale);
      const auto t2 = Clock::now();
      f += seconds(t0, t1);
      g += seconds(t1, t2);
    }
    const double cpu = pt::bench::process_cpu_seconds() - c0;
    if (r < 0) continue;
    cpu_rate.push_back(flops * iters / cpu / 1e9);
    fwd.push_back(f / iters);
    bwd.push_back(g / iters);
    rate.push_back(flops * iters / (f + g) / 1e9);
  }
  const pt::bench::Spread s = pt::bench::spread_of(rate);
  pt::bench::emit({{"bench", std::string("attention")},
                   {"B", B},
                   {"T", T},
                   {"H", H},
                   {"Dh", Dh},
                   {"threads", int64_t{threads}},
                   {"fwd_ms_median", pt::bench::spread_of(fwd).median * 1e3},
                   {"bwd_ms_median", pt::bench::spread_of(bwd).median * 1e3},
                   {"gflops_median", s.median},
                   {"gflops_min", s.min},
                   {"gflops_max", s.max},
                   {"gflops_cpu_median", pt::bench::spread_of(cpu_rate).median},
                   {"reps", int64_t{s.reps}}});
  return 0;
}
