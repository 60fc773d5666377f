// CudaBackend's GEMM ops: cuBLASLt with fp32, tf32 or bf16 operands (copied to bf16 here) and
// the bias epilogue, and the K = 0 products cuBLASLt rejects. A file of their own: the only ops
// with a precision choice and a fallback.
#include "kernels/cuda/cuda_backend.h"

#include "kernels/cuda/convert.h"
#include "kernels/cuda/cublaslt_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/fill.h"

namespace pt::cuda {

namespace {

GemmPrecision gemm_precision(Precision p) {
  switch (p) {
    case Precision::tf32: return GemmPrecision::tf32;
    case Precision::bf16: return GemmPrecision::bf16;
    default: return GemmPrecision::fp32;
  }
}

}  // namespace

// ---- GEMM -----------------------------------------------------------------------------------

void CudaBackend::gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                       float* C, int64_t ldc) {
  lt_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
}

void CudaBackend::gemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                            const float* A, int64_t lda, const float* B, int64_t ldb,
                            const float* bias, float* C, int64_t ldc) {
  // No product, or no cuBLASLt algorithm with the bias epilogue for this shape: the base class's
  // gemm then add_bias.
  if (K == 0 || !bias_epilogue_) {
    Backend::gemm_bias(trans_a, trans_b, M, N, K, A, lda, B, ldb, bias, C, ldc);
    return;
  }
  try {
    lt_gemm(trans_a, trans_b, M, N, K, 1.f, A, lda, B, ldb, 0.f, C, ldc, bias);
  } catch (const LtNoAlgorithm&) {  // nothing was queued but harmless bf16 conversions
    bias_epilogue_ = false;
    Backend::gemm_bias(trans_a, trans_b, M, N, K, A, lda, B, ldb, bias, C, ldc);
  }
}

void CudaBackend::lt_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                          float* C, int64_t ldc, const float* bias) {
  if (M == 0 || N == 0) return;
  DeviceGuard guard(device_);
  if (K == 0 && ldc == N) {  // C = beta * C: nothing to multiply, and cuBLASLt rejects k = 0
    if (beta == 0.f)
      check(launch_fill(C, 0.f, M * N, compute_), "launch_fill");
    else if (beta != 1.f)
      check(launch_scale(beta, C, M * N, compute_), "launch_scale");
    return;
  }
  if (K == 0) {  // the same, row by row past the padding
    for (int64_t r = 0; r < M; ++r) {
      if (beta == 0.f)
        check(launch_fill(C + r * ldc, 0.f, N, compute_), "launch_fill");
      else if (beta != 1.f)
        check(launch_scale(beta, C + r * ldc, N, compute_), "launch_scale");
    }
    return;
  }
  const GemmPrecision precision = gemm_precision(precision_);
  const uint16_t* a16 = nullptr;
  const uint16_t* b16 = nullptr;
  if (precision == GemmPrecision::bf16) {
    // Operands as stored: rows x leading dimension, the last row only up to its last column.
    const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
    const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    const int64_t a_elems = (a_rows - 1) * lda + a_cols, b_elems = (b_rows - 1) * ldb + b_cols;
    auto* base = static_cast<uint16_t*>(
        scratch(operands_, static_cast<size_t>(a_elems + b_elems) * sizeof(uint16_t) + 256,
                "bf16 GEMM operands"));
    uint16_t* a_copy = base;
    // Keep B's copy 256-byte aligned, as cuBLASLt prefers.
    uint16_t* b_copy = base + (a_elems + 127) / 128 * 128;
    check(launch_f32_to_bf16(A, a_copy, a_elems, compute_), "launch_f32_to_bf16 (A)");
    check(launch_f32_to_bf16(B, b_copy, b_elems, compute_), "launch_f32_to_bf16 (B)");
    a16 = a_copy;
    b16 = b_copy;
  }
  gemm_->gemm(precision, trans_a, trans_b, M, N, K, alpha, A, a16, lda, B, b16, ldb, beta, C, ldc,
              bias);
}

}  // namespace pt::cuda
