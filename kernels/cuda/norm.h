#pragma once
// Layer normalisation over the last dimension of x(rows, cols), the CUDA side of
// Backend::layernorm_* (same formulas as kernels/cpu/cpu_norm.cpp: biased variance, eps inside
// the square root, float arithmetic).
//
// Every launcher queues its work on `stream` (asynchronous), launches nothing when rows or cols
// is 0, and returns the launch error (cudaSuccess otherwise); execution errors surface at the
// next synchronisation. All pointers are device pointers.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace pt::cuda {

// y(rows, cols) = (x - mean) * rstd * gamma(cols) + beta(cols); mean(rows) and rstd(rows) are
// written for the backward pass.
cudaError_t launch_layernorm_forward(const float* x, const float* gamma, const float* beta,
                                     float* y, float* mean, float* rstd, int64_t rows, int64_t cols,
                                     float eps, cudaStream_t stream);

// dx(rows, cols) = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)), with g = dy * gamma and
// xhat = (x - mean) * rstd. Overwrites dx.
cudaError_t launch_layernorm_backward_input(const float* dy, const float* x, const float* gamma,
                                            const float* mean, const float* rstd, float* dx,
                                            int64_t rows, int64_t cols, cudaStream_t stream);

// dgamma(cols) += sum_r dy * xhat; dbeta(cols) += sum_r dy. ACCUMULATES, so micro-batches add
// up; the summation order is fixed, so the result is the same on every run.
cudaError_t launch_layernorm_backward_weight(const float* dy, const float* x, const float* mean,
                                             const float* rstd, float* dgamma, float* dbeta,
                                             int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace pt::cuda
