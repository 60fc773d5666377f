// CudaBackend's causal attention: cuDNN's fused flash attention (kernels/cuda/cudnn_attention.h)
// or the backend's own kernels (kernels/cuda/attention.h), as --attention and the precision say.
//
// cuDNN's engine takes bf16 operands: today's activations are fp32, so qkv (and out, dout) are
// converted on the way in and out, dqkv on the way out. The log-sum-exp is the same quantity in
// both paths (natural log of the scaled, masked scores' exponential sum), so a forward by one
// and a backward by the other agree.
#include <fmt/format.h>

#include <cstdio>

#include "engine/core/error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/cudnn_graph.h"

namespace pt::cuda {

namespace {
void check_head_dim(int64_t Dh) {
  if (Dh < 1 || Dh > kMaxAttentionHeadDim)
    throw UsageError(
        fmt::format("the CUDA attention kernels support head dimensions 1..{}, got {}: use more "
                    "heads (d_model / heads <= {})",
                    kMaxAttentionHeadDim, Dh, kMaxAttentionHeadDim));
}
}  // namespace

bool CudaBackend::cudnn_attention_wanted(int64_t Dh) const {
  if (attention_ == AttentionKernel::native || cudnn_attention_off_) return false;
  const std::string why_not = CudnnAttention::unsupported_shape(Dh);
  if (requires_cudnn(attention_)) {
    if (!why_not.empty())
      throw UsageError(fmt::format(
          "--attention {} on {}: cuDNN cannot run {}; use --attention native or auto, or another "
          "--heads",
          attention_name(attention_), name_, why_not));
    return true;
  }
  // automatic: cuDNN's engine computes in bf16, so only where the GEMMs do too.
  return precision_ == Precision::bf16 && why_not.empty();
}

void CudaBackend::cudnn_attention_refused(const std::exception& e, int64_t B, int64_t T, int64_t H,
                                          int64_t Dh) {
  const std::string shape = fmt::format("B {}, T {}, H {}, head dimension {}", B, T, H, Dh);
  if (requires_cudnn(attention_))
    throw UsageError(
        fmt::format("--attention {} on {}: cuDNN {} refused attention ({}): {}; use "
                    "--attention native or auto",
                    attention_name(attention_), name_, CudnnAttention::version(), shape, e.what()));
  cudnn_attention_off_ = true;
  fmt::print(stderr,
             "{}: cuDNN {}'s fused attention is unavailable ({}): {}; using the native attention "
             "kernel for this run\n",
             name_, CudnnAttention::version(), shape, e.what());
}

CudnnAttention& CudaBackend::cudnn_attention() {
  if (!cudnn_attention_) cudnn_attention_ = std::make_unique<CudnnAttention>(compute_);
  return *cudnn_attention_;
}

void CudaBackend::attention_forward(const float* qkv, float* out, float* lse, int64_t B, int64_t T,
                                    int64_t H, int64_t Dh, float scale) {
  check_head_dim(Dh);
  DeviceGuard guard(device_);
  if (cudnn_attention_wanted(Dh)) {
    const int64_t n_qkv = B * T * 3 * H * Dh, n_out = B * T * H * Dh;
    auto* qkv16 = static_cast<uint16_t*>(
        scratch(attention_operands_, static_cast<size_t>(n_qkv + n_out) * sizeof(uint16_t),
                "bf16 attention operands"));
    uint16_t* out16 = qkv16 + n_qkv;
    check(launch_f32_to_bf16(qkv, qkv16, n_qkv, compute_), "launch_f32_to_bf16 (qkv)");
    try {
      cudnn_attention().forward(qkv16, out16, lse, B, T, H, Dh, scale, [&](size_t bytes) {
        return scratch(attention_workspace_, bytes, "cuDNN attention workspace");
      });
      check(launch_bf16_to_f32(out16, out, n_out, compute_), "launch_bf16_to_f32 (out)");
      return;
    } catch (const cudnn_graph::Refused& e) {
      cudnn_attention_refused(e, B, T, H, Dh);  // nothing was queued but the conversion
    }
  }
  check(launch_attention_forward(qkv, out, lse, B, T, H, Dh, scale, compute_),
        "launch_attention_forward");
}

void CudaBackend::attention_backward(const float* qkv, const float* out, const float* dout,
                                     const float* lse, float* dqkv, int64_t B, int64_t T, int64_t H,
                                     int64_t Dh, float scale) {
  check_head_dim(Dh);
  DeviceGuard guard(device_);
  if (cudnn_attention_wanted(Dh)) {
    const int64_t n_qkv = B * T * 3 * H * Dh, n_out = B * T * H * Dh;
    auto* qkv16 = static_cast<uint16_t*>(
        scratch(attention_operands_, static_cast<size_t>(2 * n_qkv + 2 * n_out) * sizeof(uint16_t),
                "bf16 attention operands"));
    uint16_t* out16 = qkv16 + n_qkv;
    uint16_t* dout16 = out16 + n_out;
    uint16_t* dqkv16 = dout16 + n_out;
    check(launch_f32_to_bf16(qkv, qkv16, n_qkv, compute_), "launch_f32_to_bf16 (qkv)");
    check(launch_f32_to_bf16(out, out16, n_out, compute_), "launch_f32_to_bf16 (out)");
    check(launch_f32_to_bf16(dout, dout16, n_out, compute_), "launch_f32_to_bf16 (dout)");
    try {
      cudnn_attention().backward(
          qkv16, out16, dout16, lse, dqkv16, B, T, H, Dh, scale,
          attention_ == AttentionKernel::cudnn_deterministic, [&](size_t bytes) {
            return scratch(attention_workspace_, bytes, "cuDNN attention workspace");
          });
      check(launch_bf16_to_f32(dqkv16, dqkv, n_qkv, compute_), "launch_bf16_to_f32 (dqkv)");
      return;
    } catch (const cudnn_graph::Refused& e) {
      cudnn_attention_refused(e, B, T, H, Dh);
    }
  }
  auto* d = static_cast<float*>(scratch(partials_, static_cast<size_t>(B * H * T) * sizeof(float),
                                        "attention backward scratch"));
  check(launch_attention_backward(qkv, out, dout, lse, dqkv, d, B, T, H, Dh, scale, compute_),
        "launch_attention_backward");
}

}  // namespace pt::cuda
