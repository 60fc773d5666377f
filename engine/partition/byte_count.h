#pragma once
// Byte counts of the memory model that saturate instead of overflowing. A cost file's fields go to
// 2^50 bytes per layer and 2^20 layers, scaled by up to 2^40 samples per micro-batch, times
// micro-batches in flight and optimizer slots: plain int64_t arithmetic wrapped there and made a
// plan's peak negative, which then fit every memory cap. A saturated count (kBytesBeyond, about
// 8 EiB) means "more than any device holds": it is over every cap and stays so when more is added.
#include <cmath>
#include <cstdint>
#include <limits>

namespace pt {

inline constexpr int64_t kBytesBeyond = std::numeric_limits<int64_t>::max();

// a + b for counts >= 0, saturating at kBytesBeyond.
constexpr int64_t add_bytes(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? kBytesBeyond : out;
}

// n x a for n, a >= 0, saturating at kBytesBeyond.
constexpr int64_t times_bytes(int64_t n, int64_t a) {
  int64_t out = 0;
  return __builtin_mul_overflow(n, a, &out) ? kBytesBeyond : out;
}

// A count computed in double (a scaled table), rounded; kBytesBeyond from 2^63 up (llround's
// result is unspecified there: it gave INT64_MIN, a negative size).
inline int64_t bytes_from_double(double bytes) {
  if (!(bytes < 0x1p63)) return kBytesBeyond;  // NaN too: never a size that fits
  return bytes <= 0 ? 0 : static_cast<int64_t>(std::llround(bytes));
}

}  // namespace pt
