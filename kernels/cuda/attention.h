#pragma once
// Causal multi-head self-attention on the GPU, memory-efficient (no (T, T) matrix is stored) and
// deterministic (no float atomics). Same layouts and semantics as Backend::attention_forward /
// attention_backward (engine/core/backend.h) and the CPU version (kernels/cpu/cpu_attention.cpp):
//   qkv (B, T, 3, H, Dh) -> out (B, T, H, Dh), lse (B, H, T)
//   out[b,t,h] = sum_{s<=t} softmax_s(scale q[b,t,h] . k[b,s,h]) v[b,s,h]
//   lse[b,h,t] = log sum_{s<=t} exp(scale q[b,t,h] . k[b,s,h])
// All pointers are device pointers to distinct, non-overlapping buffers.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace pt::cuda {

// The largest head dimension the kernels support (checked by the caller, which throws a clear
// error). Each lane of a warp holds at most 4 elements of a head row in registers.
inline constexpr int64_t kMaxAttentionHeadDim = 128;

// Queues the forward pass on `stream` (asynchronous). B * T * H == 0 launches nothing and returns
// cudaSuccess. Returns cudaErrorInvalidValue when Dh < 1, Dh > kMaxAttentionHeadDim or any of
// B, T, H is negative; otherwise the launch error, if any (cudaGetLastError()).
cudaError_t launch_attention_forward(const float* qkv /* (B, T, 3, H, Dh) */,
                                     float* out /* (B, T, H, Dh) */, float* lse /* (B, H, T) */,
                                     int64_t B, int64_t T, int64_t H, int64_t Dh, float scale,
                                     cudaStream_t stream);

// Queues the backward pass on `stream` (asynchronous): dqkv (B, T, 3, H, Dh) = d(out)/d(qkv)
// applied to dout, overwriting every element of dqkv. out and lse are the forward's outputs for
// the same qkv and scale. scratch is B * H * T floats of device memory that the caller owns; the
// kernels use it for D[b,h,t] = dout[b,t,h] . out[b,t,h] and are done with it once the queued
// work completes (so the caller may free it stream-ordered right after this call). Same return
// values as launch_attention_forward; a null scratch with B * T * H > 0 is cudaErrorInvalidValue.
cudaError_t launch_attention_backward(const float* qkv /* (B, T, 3, H, Dh) */,
                                      const float* out /* (B, T, H, Dh) */,
                                      const float* dout /* (B, T, H, Dh) */,
                                      const float* lse /* (B, H, T) */,
                                      float* dqkv /* (B, T, 3, H, Dh) */,
                                      float* scratch /* (B, H, T) */, int64_t B, int64_t T,
                                      int64_t H, int64_t Dh, float scale, cudaStream_t stream);

}  // namespace pt::cuda
