#pragma once
// What the elementwise and optimizer kernels share: one grid-stride kernel that applies a
// per-index functor, sized by launch_shape.h, and the unfusable, correctly rounded float
// arithmetic that lets them take the CPU backend's bits (kernels/cpu is built with
// -ffp-contract=off; __fmul_rn is never fused into an FMA, whatever nvcc's -fmad). CUDA only.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/launch_shape.h"

namespace pt::cuda {

template <class Op>
__global__ void for_each_index_kernel(int64_t n, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    op(i);
}

// Queues op(i) for i in [0, n) on `stream`; n == 0 launches nothing.
template <class Op>
cudaError_t launch_for_each(int64_t n, const Op& op, cudaStream_t stream) {
  const LaunchShape1d shape = launch_shape_1d(n);
  if (shape.blocks == 0) return cudaSuccess;
  for_each_index_kernel<<<static_cast<unsigned>(shape.blocks), static_cast<unsigned>(shape.threads),
                          0, stream>>>(n, op);
  return cudaGetLastError();
}

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }

}  // namespace pt::cuda
