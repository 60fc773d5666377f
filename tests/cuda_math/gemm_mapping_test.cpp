// The CUDA backend's row-major GEMM runs as a column-major cuBLASLt GEMM on swapped operands
// (C^T = op(B)^T op(A)^T). to_column_major is that mapping; here a column-major reference GEMM
// fed with its output must reproduce a row-major reference, for every transpose combination and
// padded leading dimensions. No GPU needed.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/core/random.h"
#include "kernels/cuda/cublaslt_gemm.h"

namespace {

// cuBLAS semantics: C = alpha op(X) op(Y) + beta C, every matrix column-major.
void column_major_gemm(bool tx, bool ty, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* X, int64_t ldx, const float* Y, int64_t ldy, float beta,
                       float* C, int64_t ldc) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = tx ? X[p + i * ldx] : X[i + p * ldx];
        const double y = ty ? Y[j + p * ldy] : Y[p + j * ldy];
        acc += x * y;
      }
      C[i + j * ldc] = static_cast<float>(alpha * acc + beta * C[i + j * ldc]);
    }
}

}  // namespace

TEST_CASE("row-major GEMM as a column-major GEMM on swapped operands") {
  pt::CounterRng rng(7);
  const auto uniform = [&] { return static_cast<float>(rng.next_double() * 2 - 1); };
  int cases = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : {1, 3, 7})
        for (int64_t N : {1, 4, 5})
          for (int64_t K : {1, 2, 6}) {
            CAPTURE(ta);
            CAPTURE(tb);
            CAPTURE(M);
            CAPTURE(N);
            CAPTURE(K);
            const int64_t lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1, ldc = N + 3;
            std::vector<float> A(static_cast<size_t>((ta ? K : M) * lda)),
                B(static_cast<size_t>((tb ? N : K) * ldb)), C(static_cast<size_t>(M * ldc));
            for (float& v : A) v = uniform();
            for (float& v : B) v = uniform();
            for (float& v : C) v = uniform();
            std::vector<float> ref = C;
            const float alpha = 0.7f, beta = -0.3f;
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) {
                double acc = 0;
                for (int64_t p = 0; p < K; ++p)
                  acc += static_cast<double>(ta ? A[static_cast<size_t>(p * lda + i)]
                                                : A[static_cast<size_t>(i * lda + p)]) *
                         (tb ? B[static_cast<size_t>(j * ldb + p)]
                             : B[static_cast<size_t>(p * ldb + j)]);
                float& r = ref[static_cast<size_t>(i * ldc + j)];
                r = static_cast<float>(alpha * acc + beta * r);
              }
            const pt::cuda::ColumnMajorGemm cm =
                pt::cuda::to_column_major(ta, tb, M, N, K, lda, ldb, ldc);
            REQUIRE(cm.first_is_b);
            // Each stored operand's leading dimension covers its rows as cuBLAS sees them.
            CHECK(cm.ld_first >= (cm.trans_first ? cm.k : cm.m));
            CHECK(cm.ld_second >= (cm.trans_second ? cm.n : cm.k));
            CHECK(cm.ld_c >= cm.m);
            column_major_gemm(cm.trans_first, cm.trans_second, cm.m, cm.n, cm.k, alpha, B.data(),
                              cm.ld_first, A.data(), cm.ld_second, beta, C.data(), cm.ld_c);
            float worst = 0;
            for (size_t i = 0; i < C.size(); ++i) worst = std::max(worst, std::fabs(C[i] - ref[i]));
            CHECK(worst <= 1e-5f);
            ++cases;
          }
  CHECK(cases == 108);
}
