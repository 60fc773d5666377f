#pragma once
// Float maths the compiler can vectorise (internal to kernels/cpu). glibc's expf/tanhf/erff are
// scalar calls that cost 5-20 ns an element, more than the GEMMs around an activation; these
// are branch-free polynomials (Cephes, Numerical Recipes) of about float accuracy, so a loop of
// them becomes 8- or 16-wide SIMD.
//
// PT_CPU_SIMD_CLONES compiles a loop for AVX-512, AVX2 and baseline x86-64 and picks one at load
// time, since the build targets generic x86-64. kernels/cpu is compiled with -ffp-contract=off
// (sources.cmake), so no version fuses a*b+c into an FMA: all round the same way, and these loops
// give the same bits on any x86-64 machine.
#include <bit>
#include <cstdint>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define PT_CPU_SIMD_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PT_CPU_SIMD_CLONES
#endif

namespace pt::cpu {

// e^x, relative error ~2 ulp. Cody-Waite range reduction x = n ln2 + r with n from the
// 1.5*2^23 rounding trick (no float->int conversion, so NaN stays well defined), Cephes
// polynomial for e^r. Overflows to inf above ~88.38, flushes to 0 below -87.34 (no denormals).
inline float exp_f32(float x) {
  constexpr float kHi = 88.3762626647949f, kLo = -87.3365447505531f;
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const float xc = x > kHi ? kHi : (x < kLo ? kLo : x);
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;  // |r| <= ln2 / 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * (r * r) + r + 1.f;
  // 2^n: the low bits of t hold n (+ 0x4B400000); shift n + 127 into the exponent field.
  const uint32_t bits = (std::bit_cast<uint32_t>(t) - 0x4B400000u + 127u) << 23;
  const float y = er * std::bit_cast<float>(bits);
  // NaN compares false both ways and comes out through r.
  return x > kHi ? std::numeric_limits<float>::infinity() : (x < kLo ? 0.f : y);
}

// tanh(x): Cephes' odd polynomial for |x| < 0.625 (keeps relative accuracy near 0), else
// 1 - 2 / (e^{2|x|} + 1) with the sign of x. Both are computed and one selected (no branch).
inline float tanh_f32(float x) {
  const float ax = x < 0.f ? -x : x;
  const float s = x * x;
  float p = -5.70498872745e-3f;
  p = p * s + 2.06390887954e-2f;
  p = p * s - 5.37397155531e-2f;
  p = p * s + 1.33314422036e-1f;
  p = p * s - 3.33332819422e-1f;
  const float small = p * s * x + x;
  const float big_abs = 1.f - 2.f / (exp_f32(2.f * ax) + 1.f);
  const float big = x < 0.f ? -big_abs : big_abs;
  return ax < 0.625f ? small : big;
}

// The standard normal CDF Phi(x) = (1 + erf(x / sqrt 2)) / 2 through erfc (Numerical Recipes'
// Chebyshev fit, fractional error < 1.2e-7): relative accuracy holds in the lower tail too.
inline float normal_cdf_f32(float x) {
  const float z = (x < 0.f ? -x : x) * 0.70710678118654752440f;
  const float t = 1.f / (1.f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float half_erfc = 0.5f * t * exp_f32(p - z * z);
  return x < 0.f ? half_erfc : 1.f - half_erfc;
}

}  // namespace pt::cpu
