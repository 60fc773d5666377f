#pragma once
// Fused optimizer updates for the CUDA backend: one pass over parameter, gradient and state per
// element, with the float arithmetic of kernels/cpu/cpu_optim.cpp in the same order, so both
// backends take the same step bit for bit (engine/core/backend.h gives the PyTorch semantics).
//
// Each launcher queues its kernel on `stream` (asynchronous), launches nothing when n == 0, and
// returns the launch error (cudaSuccess otherwise). Arguments the CPU backend rejects with a
// UsageError give cudaErrorInvalidValue, before anything is queued. All pointers are device
// pointers.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "engine/core/backend.h"

namespace pt::cuda {

// param_out is param (in place) or a buffer that does not overlap it (Backend::sgd_update).
// momentum_buf may be null when p.momentum == 0 (it is then not touched); a null buffer with
// non-zero momentum is cudaErrorInvalidValue.
cudaError_t launch_sgd_update(const float* param, const float* grad, float* param_out,
                              float* momentum_buf, int64_t n, const pt::SgdParams& p,
                              cudaStream_t stream);
// p.step counts from 1; step < 1 is cudaErrorInvalidValue.
cudaError_t launch_adamw_update(const float* param, const float* grad, float* param_out, float* m,
                                float* v, int64_t n, const pt::AdamWParams& p, cudaStream_t stream);

}  // namespace pt::cuda
