#pragma once
// The benchmarks' timer: `warmup` untimed calls, then the fastest of `reps` timed ones (the
// minimum is the least noisy figure on a shared machine).
#include <algorithm>
#include <chrono>
#include <ctime>

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

// CPU seconds this process has run (all its threads). On a machine whose cores other programs
// also use, a single-threaded rate per CPU second is what the code does while it runs; wall time
// also counts the time it waited for a core.
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace pt::bench
