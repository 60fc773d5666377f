#pragma once
// The median of a sample: what every measurement here reports (profiled layer costs, the step's
// epilogue, the recent step times, the benchmarks), since one slow repetition — another process
// woke up — must not move it. The mean of the two middle values when the count is even; 0 when
// there is none.
#include <algorithm>
#include <vector>

namespace pt {

inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace pt
