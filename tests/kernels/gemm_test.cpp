// GEMM against a double-precision reference: all transpose combinations, beta 0 and 1, odd
// sizes and padded row strides.
#include <doctest/doctest.h>

#include <limits>

#include "engine/core/error.h"
#include "tests/kernels/kernel_test_util.h"

using namespace pt;
using namespace pt::test;

namespace {

// C(M,N) = alpha op(A) op(B) + beta C in double, with the same storage conventions as gemm.
std::vector<double> gemm_ref(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                             const std::vector<float>& A, int64_t lda, const std::vector<float>& B,
                             int64_t ldb, double beta, const std::vector<float>& C, int64_t ldc) {
  std::vector<double> out = to_double(C);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double a =
            ta ? A[static_cast<size_t>(k * lda + i)] : A[static_cast<size_t>(i * lda + k)];
        const double b =
            tb ? B[static_cast<size_t>(j * ldb + k)] : B[static_cast<size_t>(k * ldb + j)];
        acc += a * b;
      }
      const size_t c = static_cast<size_t>(i * ldc + j);
      out[c] = alpha * acc + (beta == 0.0 ? 0.0 : beta * static_cast<double>(C[c]));
    }
  return out;
}

}  // namespace

TEST_CASE("gemm: all transposes, beta 0 and 1, odd sizes, padded strides") {
  CpuBackend be(0, 1);
  const int64_t M = 37, N = 29, K = 53;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.f, 1.f}) {
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(beta);
        // Stored shapes: A (M,K) or (K,M); B (K,N) or (N,K); each row padded by 3.
        const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K;
        const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N;
        const int64_t lda = a_cols + 3, ldb = b_cols + 3, ldc = N + 3;
        const auto A = random_floats(static_cast<size_t>(a_rows * lda), 11);
        const auto B = random_floats(static_cast<size_t>(b_rows * ldb), 12);
        auto C = random_floats(static_cast<size_t>(M * ldc), 13);
        // beta = 0 must ignore C entirely, even NaN.
        if (beta == 0.f)
          for (auto& c : C) c = std::numeric_limits<float>::quiet_NaN();
        Floats a(be, A), b(be, B), c(be, C);
        be.gemm(ta, tb, M, N, K, 0.75f, a.get(), lda, b.get(), ldb, beta, c.get(), ldc);
        auto ref = gemm_ref(ta, tb, M, N, K, 0.75, A, lda, B, ldb, beta, C, ldc);
        // The padding columns of C are not part of the output: they must stay as they were.
        auto got = c.read();
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = N; j < ldc; ++j) {
            const size_t at = static_cast<size_t>(i * ldc + j);
            got[at] = 0.f;
            ref[at] = 0.0;
          }
        check_close(got, ref, 1e-5, 1e-5, "gemm");
      }
}

// The Linear forward's case C = A B^T with N >= 64 runs on a matmul primitive (cpu_gemm.cpp),
// gemm_bias with the bias inside it: checked here with padded strides, NaN in C and its padding
// left alone, on 1 and 2 threads.
TEST_CASE("gemm and gemm_bias: A B^T on the matmul primitive, padded strides, 1 and 2 threads") {
  const int64_t M = 37, N = 70, K = 53, lda = K + 3, ldb = K + 5, ldc = N + 2;
  const auto A = random_floats(static_cast<size_t>(M * lda), 41);
  const auto B = random_floats(static_cast<size_t>(N * ldb), 42);
  const auto bias = random_floats(static_cast<size_t>(N), 43);
  std::vector<float> C(static_cast<size_t>(M * ldc), std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = N; j < ldc; ++j) C[static_cast<size_t>(i * ldc + j)] = 7.f;  // padding
  auto ref = gemm_ref(false, true, M, N, K, 1.0, A, lda, B, ldb, 0.0, C, ldc);
  auto ref_bias = ref;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      if (j >= N)
        ref[at] = ref_bias[at] = 7.0;  // untouched
      else
        ref_bias[at] += bias[static_cast<size_t>(j)];
    }
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    CpuBackend be(0, threads);
    Floats a(be, A), b(be, B), bb(be, bias), c(be, C), cb(be, C);
    be.gemm(false, true, M, N, K, 1.f, a.get(), lda, b.get(), ldb, 0.f, c.get(), ldc);
    check_close(c.read(), ref, 1e-5, 1e-5, "gemm A B^T");
    be.gemm_bias(false, true, M, N, K, a.get(), lda, b.get(), ldb, bb.get(), cb.get(), ldc);
    check_close(cb.read(), ref_bias, 1e-5, 1e-5, "gemm_bias A B^T");
  }
}

TEST_CASE("gemm: beta accumulates (calling twice with beta 1 doubles a product)") {
  CpuBackend be(0, 1);
  const int64_t M = 5, N = 7, K = 3;
  const auto A = random_floats(M * K, 21), B = random_floats(K * N, 22);
  Floats a(be, A), b(be, B), c(be, static_cast<size_t>(M * N), 0.f);
  be.gemm(false, false, M, N, K, 1.f, a.get(), K, b.get(), N, 1.f, c.get(), N);
  const auto once = c.read();
  be.gemm(false, false, M, N, K, 1.f, a.get(), K, b.get(), N, 1.f, c.get(), N);
  std::vector<double> twice(once.size());
  for (size_t i = 0; i < once.size(); ++i) twice[i] = 2.0 * once[i];
  check_close(c.read(), twice, 0.0, 0.0, "gemm beta=1 twice");  // x + x is exact
}

TEST_CASE("gemm: K = 0 scales C by beta; bad strides are usage errors") {
  CpuBackend be(0, 1);
  Floats c(be, {1.f, 2.f, 3.f, 4.f});
  be.gemm(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.5f, c.get(), 2);
  check_close(c.read(), {0.5, 1.0, 1.5, 2.0}, 0.0, 0.0, "gemm K=0");
  be.gemm(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.f, c.get(), 2);
  check_close(c.read(), {0.0, 0.0, 0.0, 0.0}, 0.0, 0.0, "gemm K=0 beta=0");

  Floats a(be, 6, 1.f), b(be, 6, 1.f);
  CHECK_THROWS_AS(be.gemm(false, false, 2, 2, 3, 1.f, a.get(), 2, b.get(), 2, 0.f, c.get(), 2),
                  UsageError);  // lda 2 < K 3
  CHECK_THROWS_AS(be.gemm(false, true, 2, 2, 3, 1.f, a.get(), 3, b.get(), 3, 0.f, c.get(), 1),
                  UsageError);  // ldc 1 < N 2
}

TEST_CASE("gemm: deterministic") {
  CpuBackend be(0, 1);
  const int64_t M = 129, N = 65, K = 257;
  const auto A = random_floats(M * K, 31), B = random_floats(K * N, 32);
  Floats a(be, A), b(be, B), c1(be, static_cast<size_t>(M * N), 0.f),
      c2(be, static_cast<size_t>(M * N), 0.f);
  be.gemm(false, true, M, N, K, 1.f, a.get(), K, b.get(), K, 0.f, c1.get(), N);
  be.gemm(false, true, M, N, K, 1.f, a.get(), K, b.get(), K, 0.f, c2.get(), N);
  CHECK(same_bits(c1.read(), c2.read()));
}
