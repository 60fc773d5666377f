#pragma once
// Max and average pooling over NCHW planes, the CUDA side of Backend::maxpool2d_* and
// avgpool2d_* (same semantics as kernels/cpu/cpu_pool.cpp: argmax is the flat index h*W + w
// within the plane of the window's first maximum, -1 with y = -inf for a window entirely in
// the padding; average pooling divides by the window clipped to the padded input, i.e.
// count_include_pad).
//
// Every launcher queues its work on `stream` (asynchronous), launches nothing when its output
// is empty, and returns the launch error (cudaSuccess otherwise); execution errors surface at
// the next synchronisation. All pointers are device pointers.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "engine/core/backend.h"

namespace pt::cuda {

// y, argmax (N, C, P, Q) from x (N, C, H, W).
cudaError_t launch_maxpool2d_forward(const pt::Pool2dShape& s, const float* x, float* y,
                                     int32_t* argmax, cudaStream_t stream);

// dx (N, C, H, W) = sum of dy over the windows whose argmax is that element (OVERWRITES dx,
// as the CPU does). Returns cudaErrorInvalidValue for a stride below 1.
cudaError_t launch_maxpool2d_backward(const pt::Pool2dShape& s, const float* dy,
                                      const int32_t* argmax, float* dx, cudaStream_t stream);

// y (N, C, P, Q) = sum of the window's elements / window size counting padding.
cudaError_t launch_avgpool2d_forward(const pt::Pool2dShape& s, const float* x, float* y,
                                     cudaStream_t stream);

// dx (N, C, H, W) = sum over the windows containing the element of dy / window size
// (OVERWRITES dx, as the CPU does). Returns cudaErrorInvalidValue for a stride below 1.
cudaError_t launch_avgpool2d_backward(const pt::Pool2dShape& s, const float* dy, float* dx,
                                      cudaStream_t stream);

}  // namespace pt::cuda
