// f32 <-> bf16 conversion kernels (see convert.h).
//
// Design: two grid-stride loops sized by launch_shape.h. Narrowing uses __float2bfloat16_rn
// (one cvt.rn.bf16.f32 on sm_80+), round to nearest even, which convert.h's
// bf16_bits_round_nearest_even reproduces on the host. Widening is a 16-bit shift rather than a
// cvt: it is exact for every input, denormals and NaN payloads included, and is literally what
// the host's bf16_bits_to_float does.
#include "kernels/cuda/convert.h"

#include <cuda_bf16.h>

#include "kernels/cuda/launch_shape.h"

namespace pt::cuda {

namespace {

__global__ void f32_to_bf16_kernel(const float* x, uint16_t* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
  }
}

__global__ void bf16_to_f32_kernel(const uint16_t* x, float* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = __uint_as_float(static_cast<uint32_t>(x[i]) << 16);
  }
}

}  // namespace

cudaError_t launch_f32_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream) {
  const LaunchShape1d shape = launch_shape_1d(n);
  if (shape.blocks == 0) return cudaSuccess;
  f32_to_bf16_kernel<<<static_cast<unsigned>(shape.blocks), static_cast<unsigned>(shape.threads), 0,
                       stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_bf16_to_f32(const uint16_t* x, float* y, int64_t n, cudaStream_t stream) {
  const LaunchShape1d shape = launch_shape_1d(n);
  if (shape.blocks == 0) return cudaSuccess;
  bf16_to_f32_kernel<<<static_cast<unsigned>(shape.blocks), static_cast<unsigned>(shape.threads), 0,
                       stream>>>(x, y, n);
  return cudaGetLastError();
}

}  // namespace pt::cuda
