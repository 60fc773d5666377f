#pragma once
// f32 <-> bf16 conversion for bf16 mixed-precision GEMM operands. bf16 values are carried as
// their 16 bits (uint16_t) so this header needs no CUDA-only type; the host functions below
// round exactly as the device kernel does, so CPU-only tests can check the conversion.
//
// Each launcher queues its kernel on `stream` (asynchronous), launches nothing when n == 0, and
// returns the launch error (cudaSuccess otherwise). All pointers are device pointers.
#include <bit>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace pt::cuda {

// y[i] = x[i] rounded to the nearest bf16, ties to even (overflow rounds to inf; NaN stays NaN).
cudaError_t launch_f32_to_bf16(const float* x, uint16_t* y /* bf16 bits */, int64_t n,
                               cudaStream_t stream);
// y[i] = x[i] widened to f32 (exact).
cudaError_t launch_bf16_to_f32(const uint16_t* x /* bf16 bits */, float* y, int64_t n,
                               cudaStream_t stream);

// The quiet NaN that every f32 NaN becomes, as in CUDA's own host conversion (cuda_bf16.hpp).
inline constexpr uint16_t kBf16CanonicalNan = 0x7fff;

// The bf16 bits nearest to f, ties to even: __float2bfloat16_rn's rounding, on the host.
constexpr uint16_t bf16_bits_round_nearest_even(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return kBf16CanonicalNan;
  // Adding just under half an ulp of bf16, plus the lowest kept bit, rounds half to even; a carry
  // out of the mantissa is the right round-up (into the next binade, or from the largest finite
  // float to inf), and the sum cannot overflow 32 bits since NaNs were handled above.
  const uint32_t lowest_kept_bit = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lowest_kept_bit) >> 16);
}

// The f32 value of bf16 bits b (exact: bf16 is f32's top half).
constexpr float bf16_bits_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

}  // namespace pt::cuda
