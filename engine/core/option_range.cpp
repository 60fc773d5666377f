#include "engine/core/option_range.h"

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

namespace {

std::string with_note(std::string_view note) {
  return note.empty() ? std::string() : fmt::format(" ({})", note);
}

template <typename Real>
void check_real_as(std::string_view name, Real value, RealRange range, std::string_view note) {
  const auto v = static_cast<double>(value);
  const bool above = range.lo_open ? v > range.lo : v >= range.lo;
  const bool below = std::isinf(range.hi) || (range.hi_open ? v < range.hi : v <= range.hi);
  if (std::isfinite(v) && above && below) return;
  std::string bounds = fmt::format("{} {}", range.lo_open ? ">" : ">=", range.lo);
  if (!std::isinf(range.hi))
    bounds += fmt::format(" and {} {}", range.hi_open ? "<" : "<=", range.hi);
  throw UsageError(
      fmt::format("{} {} must be a finite number {}{}", name, value, bounds, with_note(note)));
}

}  // namespace

void check_real(std::string_view name, double value, RealRange range, std::string_view note) {
  check_real_as(name, value, range, note);
}

void check_real(std::string_view name, float value, RealRange range, std::string_view note) {
  check_real_as(name, value, range, note);
}

void check_integer(std::string_view name, int64_t value, int64_t lo, int64_t hi,
                   std::string_view note) {
  if (value >= lo && value <= hi) return;
  const std::string bounds = hi == std::numeric_limits<int64_t>::max()
                                 ? fmt::format(">= {}", lo)
                                 : fmt::format("between {} and {}", lo, hi);
  throw UsageError(
      fmt::format("{} {} must be an integer {}{}", name, value, bounds, with_note(note)));
}

}  // namespace pt
