#pragma once
// Comparing two runs' tensors element by element, with NaN counted as a difference.
//
// The obvious loop, worst = std::max(worst, |a - b|), ignores NaN: every comparison with NaN is
// false, so std::max keeps the old value and a parameter that became NaN in one run (or in both)
// reports "bit-identical". Here an element that is NaN on either side, NaN against NaN included,
// is a difference of +inf and is counted; so is inf against a finite value. Equal values,
// inf == inf and -0 == +0 included, are no difference.
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>

namespace pt {

struct TensorDiff {
  double max_abs = 0;    // the largest |a - b|; +inf when any element is NaN on either side
  size_t nan_count = 0;  // elements where a or b (or both) is NaN
  size_t elements = 0;   // elements compared

  bool identical() const { return max_abs == 0; }  // NaN makes max_abs +inf: never identical
  // Combines the verdicts over several tensors.
  TensorDiff& operator+=(const TensorDiff& o) {
    if (!(o.max_abs <= max_abs)) max_abs = o.max_abs;
    nan_count += o.nan_count;
    elements += o.elements;
    return *this;
  }
};

inline TensorDiff compare_tensors(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size())
    throw std::invalid_argument("compare_tensors: " + std::to_string(a.size()) + " against " +
                                std::to_string(b.size()) + " elements");
  TensorDiff d;
  d.elements = a.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      ++d.nan_count;
      d.max_abs = std::numeric_limits<double>::infinity();
      continue;
    }
    if (a[i] == b[i]) continue;  // also inf == inf, whose difference would be NaN
    const double diff = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (diff > d.max_abs) d.max_abs = diff;
  }
  return d;
}

}  // namespace pt
