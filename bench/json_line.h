#pragma once
// The benchmarks' output: one JSON object per line on stdout, flushed as it is printed, so a long
// run can be followed (`| tee`, `tail -f`) and a crash loses no finished line. Fields are typed
// (int64_t, double, string); pt::json_line (engine/report/metrics.h, the writer of --metrics files
// too) escapes strings and writes NaN and inf as null, so every line parses.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/report/metrics.h"

namespace pt::bench {

using Fields = std::vector<std::pair<std::string, MetricValue>>;

inline void emit(const Fields& fields) {
  fmt::print("{}\n", json_line(fields));
  std::fflush(stdout);
}

}  // namespace pt::bench
