// The host twin of the bf16 conversion kernel (kernels/cuda/convert.h): round to nearest, ties
// to even, NaN stays NaN, overflow to inf. The GPU test compares the kernel against it.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cuda/convert.h"

using pt::cuda::bf16_bits_round_nearest_even;
using pt::cuda::bf16_bits_to_float;

namespace {
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }
}  // namespace

TEST_CASE("bf16 rounding: exact values, ties to even, NaN and infinities") {
  CHECK(bf16_bits_round_nearest_even(1.0f) == 0x3f80);
  CHECK(bf16_bits_round_nearest_even(-2.0f) == 0xc000);
  CHECK(bf16_bits_round_nearest_even(0.0f) == 0x0000);
  CHECK(bf16_bits_round_nearest_even(-0.0f) == 0x8000);
  // 1 + 2^-8 is halfway between bf16 1.0 (even) and 1 + 2^-7: ties go to the even 1.0.
  CHECK(bf16_bits_round_nearest_even(from_bits(0x3f808000u)) == 0x3f80);
  // Halfway above an odd mantissa rounds up to the even neighbour.
  CHECK(bf16_bits_round_nearest_even(from_bits(0x3f818000u)) == 0x3f82);
  // Just above halfway rounds up.
  CHECK(bf16_bits_round_nearest_even(from_bits(0x3f808001u)) == 0x3f81);
  CHECK(bf16_bits_round_nearest_even(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(bf16_bits_round_nearest_even(-std::numeric_limits<float>::infinity()) == 0xff80);
  // The largest float rounds past bf16's largest finite value: infinity.
  CHECK(bf16_bits_round_nearest_even(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(std::isnan(bf16_bits_to_float(bf16_bits_round_nearest_even(std::nanf("")))));
}

TEST_CASE("bf16 rounding: the nearest bf16 for a sweep of floats") {
  // For every 4099th bit pattern: the result is one of the two bf16 neighbours and no farther
  // than the other one.
  int checked = 0;
  for (uint64_t b = 0; b <= 0xffffffffu; b += 4099) {
    const float f = from_bits(static_cast<uint32_t>(b));
    if (!std::isfinite(f) || std::fabs(f) > 3.38e38f) continue;
    const float r = bf16_bits_to_float(bf16_bits_round_nearest_even(f));
    const float down = from_bits(static_cast<uint32_t>(b) & 0xffff0000u);
    const float up = from_bits((static_cast<uint32_t>(b) & 0xffff0000u) + 0x10000u);
    REQUIRE((r == down || r == up));
    CHECK(std::fabs(static_cast<double>(r) - f) <=
          std::fabs(static_cast<double>(r == down ? up : down) - f));
    ++checked;
  }
  CHECK(checked > 1000000);
}
