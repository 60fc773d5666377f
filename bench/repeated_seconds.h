#pragma once
// The median and the spread of repeated measurements: what the benchmarks report (the median of
// several repetitions, with the fastest and slowest, so a noisy run shows as a wide spread
// rather than hiding behind a lucky best).
//
// Field names in the JSON lines: a timed figure `x` is printed as `x` (the median), `x_min` and
// `x_max`, next to `reps`; a rate derived from it (samples/s, GFLOP/s) is the numerator over the
// median time, its `_min` over the slowest repetition and its `_max` over the fastest (the old
// best-of-N figure).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench/json_line.h"
#include "engine/report/median.h"

namespace pt::bench {

struct Spread {
  double median = 0, min = 0, max = 0;
  int reps = 0;
};

inline Spread spread_of(std::vector<double> values) {
  Spread s;
  s.reps = static_cast<int>(values.size());
  if (values.empty()) return s;
  s.median = median_of(values);
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  s.min = *lo;
  s.max = *hi;
  return s;
}

// `warmup` untimed calls of `f`, then the seconds of each of `reps` timed calls, in call order.
template <class F>
std::vector<double> repeated_seconds(int warmup, int reps, F&& f) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> out;
  out.reserve(static_cast<size_t>(std::max(reps, 0)));
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    out.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return out;
}

// The spread of `numerator / t` over times t: the median over the median time, min over the
// slowest and max over the fastest (a rate's spread from its times').
inline Spread rate_of(const Spread& seconds, double numerator) {
  Spread r;
  r.reps = seconds.reps;
  r.median = numerator / seconds.median;
  r.min = numerator / seconds.max;
  r.max = numerator / seconds.min;
  return r;
}

// Appends `name` (the median), `name_min` and `name_max`, each times `scale`.
inline void add_spread(Fields& fields, const std::string& name, const Spread& s,
                       double scale = 1.0) {
  fields.emplace_back(name, s.median * scale);
  fields.emplace_back(name + "_min", s.min * scale);
  fields.emplace_back(name + "_max", s.max * scale);
}

}  // namespace pt::bench
