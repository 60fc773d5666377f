#pragma once
// Whole-buffer reductions whose results the CUDA backend copies to the host: sums of squares
// (gradient norms, the MSE loss) and the non-finite check. Deterministic: the same input gives
// the same bits on every run and every GPU.
//
// Each launcher queues its work on `stream` (asynchronous) and returns the first failing CUDA
// call's error (cudaSuccess otherwise). All pointers are device pointers.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace pt::cuda {

// The number of partial sums a sum launcher writes: add them on the host in index order.
inline constexpr int kReduceBlocks = 256;

// partials[0, kReduceBlocks) = per-block sums of x[i]^2 in double; blocks without elements
// write 0, and n == 0 zeroes every partial (no kernel, a memset).
cudaError_t launch_sum_squares(const float* x, int64_t n, double* partials /* kReduceBlocks */,
                               cudaStream_t stream);
// The same with (a[i] - b[i])^2, the difference taken in double (the MSE loss).
cudaError_t launch_sum_squared_difference(const float* a, const float* b, int64_t n,
                                          double* partials /* kReduceBlocks */,
                                          cudaStream_t stream);
// *flag = 0, then 1 if any of x[0, n) is inf or NaN (n == 0 only clears it).
cudaError_t launch_count_nonfinite(const float* x, int64_t n, int* flag /* 1 int */,
                                   cudaStream_t stream);

}  // namespace pt::cuda
