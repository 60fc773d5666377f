#pragma once
// fill: x[i] = value for i in [0, n). The one custom kernel the plugin carries for now; the CUDA
// backend's Backend::fill will call it, and the plugin's self_test runs it on each GPU.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace pt::cuda {

// Queues the kernel on `stream` (asynchronous); n == 0 launches nothing. Returns the launch
// error, if any (cudaSuccess otherwise); execution errors surface at the next synchronisation.
cudaError_t launch_fill(float* x /* (n) device */, float value, int64_t n, cudaStream_t stream);

}  // namespace pt::cuda
