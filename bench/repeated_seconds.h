#pragma once
// The median and the spread of repeated measurements: what the benchmarks report (the median of
// several repetitions, with the fastest and slowest, so a noisy run shows as a wide spread
// rather than hiding behind a lucky best).
#include <algorithm>
#include <vector>

namespace pt::bench {

struct Spread {
  double median = 0, min = 0, max = 0;
  int reps = 0;
};

inline Spread spread_of(std::vector<double> values) {
  Spread s;
  s.reps = static_cast<int>(values.size());
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  s.median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  s.min = values.front();
  s.max = values.back();
  return s;
}

}  // namespace pt::bench
