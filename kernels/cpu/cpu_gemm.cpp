// GEMM on oneDNN: its sgemm (row-major C API, JIT kernels for the host's vector ISA), and for
// C = A B^T (a Linear layer's forward) a cached matmul primitive, which bench/train_step measured
// faster for that case (sgemm repacks the transposed B less well); the bias of gemm_bias is then
// added inside the primitive instead of in a second pass over C.
#include <oneapi/dnnl/dnnl.h>

#include <array>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/random.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dnnl_primitives.h"

namespace pt {

namespace {

// The matmul case: C (M,N) = A (M,K) B^T with B stored (N,K), alpha 1, beta 0. Narrow outputs
// (a classifier's 10 columns) stay on sgemm, which was faster there.
constexpr int64_t kMatmulMinN = 64;

bool use_matmul(bool trans_a, bool trans_b, int64_t N, float alpha, float beta) {
  return !trans_a && trans_b && alpha == 1.f && beta == 0.f && N >= kMatmulMinN;
}

struct MatmulKey {
  std::array<int64_t, 8> dims;  // threads, M, N, K, lda, ldb, ldc, bias
  bool operator==(const MatmulKey&) const = default;
};

struct MatmulKeyHash {
  size_t operator()(const MatmulKey& k) const {
    uint64_t h = 0;
    for (int64_t d : k.dims) h = hash_keys(h, static_cast<uint64_t>(d));
    return static_cast<size_t>(h);
  }
};

struct MatmulDescs {
  dnnl::memory::desc a, b, bias, c;
};

MatmulDescs matmul_descs(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  using dnnl::memory;
  const auto f32 = memory::data_type::f32;
  return {memory::desc({M, K}, f32, memory::dims{lda, 1}),
          memory::desc({K, N}, f32, memory::dims{1, ldb}),  // B^T: B is (N, K) with row stride ldb
          memory::desc({1, N}, f32, memory::dims{N, 1}),
          memory::desc({M, N}, f32, memory::dims{ldc, 1})};
}

// C (M,N) = A (M,K) B^T (+ bias (N) on every row when bias is not null).
void matmul_abt(Backend& backend, int threads, int64_t M, int64_t N, int64_t K, const float* A,
                int64_t lda, const float* B, int64_t ldb, const float* bias, float* C,
                int64_t ldc) {
  static cpu::PrimitiveCache<MatmulKey, MatmulKeyHash> cache;
  const MatmulDescs d = matmul_descs(M, N, K, lda, ldb, ldc);
  const MatmulKey key{{threads, M, N, K, lda, ldb, ldc, bias != nullptr}};
  const auto p = cache.get(
      key,
      [&] {
        const dnnl::matmul::desc desc =
            bias ? dnnl::matmul::desc(d.a, d.b, d.bias, d.c) : dnnl::matmul::desc(d.a, d.b, d.c);
        return cpu::wrap_primitive<dnnl::matmul::primitive_desc, dnnl::matmul>(
            dnnl::matmul::primitive_desc(desc, cpu::user_scratchpad(), cpu::dnnl_engine()));
      },
      "gemm",
      [&] {
        return fmt::format("A ({}, {}) B^T with B ({}, {}), lda={} ldb={} ldc={}", M, K, N, K, lda,
                           ldb, ldc);
      });
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, cpu::wrap_memory(d.a, A)},
                                             {DNNL_ARG_WEIGHTS, cpu::wrap_memory(d.b, B)},
                                             {DNNL_ARG_DST, cpu::wrap_memory(d.c, C)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, cpu::wrap_memory(d.bias, bias));
  cpu::execute(backend, *p, std::move(args));
}

}  // namespace

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
  if (use_matmul(trans_a, trans_b, N, alpha, beta)) {
    matmul_abt(*this, threads_, M, N, K, A, lda, B, ldb, nullptr, C, ldc);
    return;
  }
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha,
                                          A, lda, B, ldb, beta, C, ldc);
  if (status != dnnl_success)
    throw std::runtime_error(fmt::format(
        "gemm: oneDNN sgemm failed with status {} (M={} N={} K={} lda={} ldb={} ldc={})",
        static_cast<int>(status), M, N, K, lda, ldb, ldc));
}

// C(M,N) = op(A) op(B) + bias(N): the bias inside the matmul primitive when it runs the case.
void CpuBackend::gemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                           const float* A, int64_t lda, const float* B, int64_t ldb,
                           const float* bias, float* C, int64_t ldc) {
  if (M > 0 && K > 0 && use_matmul(trans_a, trans_b, N, 1.f, 0.f) && lda >= K && ldb >= K &&
      ldc >= N) {
    ensure_thread_binding();
    matmul_abt(*this, threads_, M, N, K, A, lda, B, ldb, bias, C, ldc);
    return;
  }
  Backend::gemm_bias(trans_a, trans_b, M, N, K, A, lda, B, ldb, bias, C, ldc);
}

}  // namespace pt
