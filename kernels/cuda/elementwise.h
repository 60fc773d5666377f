#pragma once
// Elementwise ops, bias add/reduce, activations and dropout for the CUDA backend: the kernels
// behind Backend::add ... Backend::dropout_backward (engine/core/backend.h has the semantics).
// They compute what kernels/cpu computes with the same float operations in the same order, so
// that apart from sum_rows_accumulate (a different, but fixed, summation order) the two
// backends agree bit for bit, as long as the plugin is not built with -ftz=true or
// --use_fast_math (flushed denormals).
//
// Every launcher queues its kernel on `stream` (asynchronous), launches nothing when there are
// no elements, and returns the launch error (cudaSuccess otherwise); execution errors surface
// at the next synchronisation. All pointers are device pointers. Outputs may alias inputs
// element for element (y == a, dx == dy, ...).
#include <cstdint>

#include <cuda_runtime_api.h>

#include "engine/core/backend.h"

namespace pt::cuda {

// y = a + b.
cudaError_t launch_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream);
// y += alpha x.
cudaError_t launch_axpy(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream);
// x *= alpha.
cudaError_t launch_scale(float alpha, float* x, int64_t n, cudaStream_t stream);
// y(rows, cols) += bias(cols), broadcast over rows.
cudaError_t launch_add_bias(float* y, const float* bias, int64_t rows, int64_t cols,
                            cudaStream_t stream);
// out(cols) += sum over rows of x(rows, cols). Deterministic (no atomics): each column's sum has
// an order fixed by rows alone, whatever the GPU.
cudaError_t launch_sum_rows_accumulate(const float* x, float* out, int64_t rows, int64_t cols,
                                       cudaStream_t stream);

// y = f(x).
cudaError_t launch_activation_forward(pt::Activation f, const float* x, float* y, int64_t n,
                                      cudaStream_t stream);
// dx = f'(x) dy. ReLU and GELU read x, Tanh reads y = tanh(x) (the other may be null).
// Returns cudaErrorInvalidValue for an Activation value outside the enum.
cudaError_t launch_activation_backward(pt::Activation f, const float* x, const float* y,
                                       const float* dy, float* dx, int64_t n, cudaStream_t stream);

// Inverted dropout: element i is kept iff pt::counter_uniform(key, i) >= p and then scaled by
// the float 1/(1-p); dropped elements are 0. p <= 0 keeps everything, p >= 1 drops everything.
// The mask is the CPU backend's, bit for bit.
cudaError_t launch_dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t key,
                                   cudaStream_t stream);
cudaError_t launch_dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t key,
                                    cudaStream_t stream);

}  // namespace pt::cuda
