#pragma once
// Range checks for options (command-line flags or the fields of the library's option structs),
// made before any work: the message names the option, the value and the range, as in
// "--lr inf must be a finite number > 0 and <= 1000". `note` is added in parentheses (what the
// bounds mean, e.g. "0: off").
#include <cstdint>
#include <limits>
#include <string_view>

namespace pt {

struct RealRange {
  double lo = 0;
  bool lo_open = false;  // true: value > lo; false: value >= lo
  double hi = std::numeric_limits<double>::infinity();
  bool hi_open = false;  // true: value < hi; false: value <= hi (no upper bound when hi is inf)
};

// Throws UsageError unless value is finite and inside range. The float overload prints the value
// as the float it is (0.05, not 0.05000000074505806).
void check_real(std::string_view name, double value, RealRange range, std::string_view note = "");
void check_real(std::string_view name, float value, RealRange range, std::string_view note = "");

// Throws UsageError unless lo <= value <= hi.
void check_integer(std::string_view name, int64_t value, int64_t lo,
                   int64_t hi = std::numeric_limits<int64_t>::max(), std::string_view note = "");

}  // namespace pt
