#pragma once
// The benchmarks' timer: `warmup` untimed calls, then the fastest of `reps` timed ones (the
// minimum is the least noisy figure on a shared machine).
#include <algorithm>
#include <chrono>

namespace pt::bench {

template <class F>
double best_seconds(int warmup, int reps, F&& f) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) f();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace pt::bench
