// GEMM on oneDNN's sgemm (row-major C API, JIT kernels for the host's vector ISA).
#include <oneapi/dnnl/dnnl.h>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace pt {

// C(M,N) = alpha * op(A)(M,K) * op(B)(K,N) + beta * C.
void CpuBackend::gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                      float* C, int64_t ldc) {
  if (M < 0 || N < 0 || K < 0)
    throw UsageError(fmt::format("gemm: negative size M={} N={} K={}", M, N, K));
  if (M == 0 || N == 0) return;
  // Row strides as stored: A is (M,K) or, transposed, (K,M); B is (K,N) or (N,K).
  const int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
  if (ldc < N || (K > 0 && (lda < a_cols || ldb < b_cols)))
    throw UsageError(fmt::format(
        "gemm: row stride too small (M={} N={} K={} trans_a={} trans_b={}: lda={} needs >= {}, "
        "ldb={} needs >= {}, ldc={} needs >= {})",
        M, N, K, trans_a, trans_b, lda, a_cols, ldb, b_cols, ldc, N));

  if (K == 0) {  // no product: C = beta * C (beta 0 overwrites, even NaN)
    for (int64_t i = 0; i < M; ++i) {
      float* __restrict c = C + i * ldc;
      if (beta == 0.f)
        for (int64_t j = 0; j < N; ++j) c[j] = 0.f;
      else
        for (int64_t j = 0; j < N; ++j) c[j] *= beta;
    }
    return;
  }

  ensure_thread_binding();
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha,
                                          A, lda, B, ldb, beta, C, ldc);
  if (status != dnnl_success)
    throw std::runtime_error(fmt::format(
        "gemm: oneDNN sgemm failed with status {} (M={} N={} K={} lda={} ldb={} ldc={})",
        static_cast<int>(status), M, N, K, lda, ldb, ldc));
}

}  // namespace pt
