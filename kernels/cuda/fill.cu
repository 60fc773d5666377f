// fill: x[i] = value (see fill.h). A grid-stride loop sized by launch_shape.h.
#include "kernels/cuda/fill.h"

#include "kernels/cuda/launch_shape.h"

namespace pt::cuda {

namespace {

__global__ void fill_kernel(float* x, float value, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    x[i] = value;
  }
}

}  // namespace

cudaError_t launch_fill(float* x, float value, int64_t n, cudaStream_t stream) {
  const LaunchShape1d shape = launch_shape_1d(n);
  if (shape.blocks == 0) return cudaSuccess;
  fill_kernel<<<static_cast<unsigned>(shape.blocks), static_cast<unsigned>(shape.threads), 0,
                stream>>>(x, value, n);
  return cudaGetLastError();
}

}  // namespace pt::cuda
