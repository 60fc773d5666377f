// Op-by-op check of the CUDA backend: every Backend op runs on cuda:0 and on the CPU backend
// (1 thread, the reference) with the same deterministic inputs (pt::CounterRng), and the results
// must agree element by element: |cuda - cpu| <= atol + rtol |cpu|. Backward ops get the CPU
// forward's outputs on both sides (mirror()), so each op is judged on its own. Outputs that the
// op overwrites start as NaN on both sides, so an element the kernel forgets shows up.
//
// Tolerances, fp32 unless the row says otherwise, and why (the table is kept out of
// clang-format, which once reflowed it into prose):
// clang-format off
//   op                                     atol             rtol   why
//   fill, dropout mask, maxpool y and      0                0      data movement and integer
//     argmax, embedding forward and                                decisions (ties included);
//     backward_weight, count_correct,                              the embedding gradient adds
//     copies, gemm K = 0 (C = beta C),                             each row in position order,
//     gemm C padding                                               as the CPU: must be identical
//   add, axpy, scale, add_bias,            1e-7             1e-6   kernels/cuda repeats the CPU's
//     activations, dropout values,                                 float operations in the CPU's
//     softmax and mse backward, pooling,                           order (documented
//     maxpool backward, sgd, adamw                                 bit-identical); 1e-6 is ~8 ulp
//                                                                  of slack (adamw v: atol 1e-12,
//                                                                  as v ~ 1e-3 g^2 is small)
//   sum_rows_accumulate, layernorm         2e-6 sqrt(rows)  1e-5   float column sums in another
//     dgamma and dbeta                                             (fixed) order: rounding grows
//                                                                  like sqrt(terms)
//   layernorm y / mean / rstd              1e-5 / 1e-6 / 0  1e-5   row sums in another order
//   layernorm backward_input               1e-5             1e-4   two row sums feed every element
//   softmax probs                          1e-9             1e-5   expf vs the CPU exp_f32
//                                                                  polynomial (a few ulp), another
//                                                                  sum order
//   softmax loss (host double)             0                1e-6   per-row logs of float sums
//   sum_squares, mse loss (host double)    0                1e-10  exact squares in double, order
//                                                                  differs
//   conv2d (cuDNN, true fp32 math)         2e-5 sqrt(terms) 1e-4   other algorithms (implicit
//                                                                  GEMM, Winograd, FFT) and
//                                                                  orders; terms = products summed
//   attention out, lse, dqkv               5e-5             5e-4   float online softmax in another
//                                                                  order; each side is within
//                                                                  2e-5 + 2e-4 |x| of a double
//                                                                  reference (tests/kernels)
//   gemm fp32                              1e-5 sqrt(K)     1e-5   cuBLASLt vs oneDNN, both fp32
//                                                                  sums
//   gemm tf32                              2.5e-3 sqrt(K)   5e-3   operands keep 10 mantissa bits
//                                                                  (error up to 2^-10 each,
//                                                                  truncation allowed): for inputs
//                                                                  in [-1, 1] ~3.5e-4 rms per
//                                                                  product, a random walk over K;
//                                                                  ~7 sigma
//   gemm bf16                              4e-3 sqrt(K)     2e-2   operands rounded to 8 bits
//                                                                  (2^-9 each): ~5.3e-4 rms per
//                                                                  product; ~7.5 sigma
// clang-format on
// A real bug (wrong transpose, stride, element, mask) is off by O(1) relative, far outside all of
// these; the GEMM tests print the largest error seen per precision for calibration.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/core/random.h"
#include "engine/devices/cuda_plugin.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/gpu/op_parity.h"

using namespace pt;

using namespace pt::test::gpu_ops;

namespace {

// ---- GEMM -------------------------------------------------------------------------------------

// C(M,N) = alpha op(A) op(B) + beta C with every row of A, B and C padded past its logical
// width; beta == 0 puts NaN in C's logical part (it must not be read). The padding of C must
// come back untouched. Returns the largest error in the logical part.
double gemm_case(Pair& P, const char* prec, Tol tol, bool ta, bool tb, int64_t M, int64_t N,
                 int64_t K, float alpha, float beta, uint64_t seed) {
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K;
  const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N;
  const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = N + 7;
  const auto A = randf(static_cast<size_t>(a_rows * lda), seed);
  const auto B = randf(static_cast<size_t>(b_rows * ldb), seed + 1);
  auto C = randf(static_cast<size_t>(M * ldc), seed + 2);
  if (beta == 0.f)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[static_cast<size_t>(i * ldc + j)] = kNaN;
  Twin a = P.upload(A), b = P.upload(B), c = P.upload(C);
  P.run([&](Backend& be, int s) {
    be.gemm(ta, tb, M, N, K, alpha, K ? a.f(s) : nullptr, lda, K ? b.f(s) : nullptr, ldb, beta,
            c.f(s), ldc);
  });
  const auto got = P.get(c, 1), ref = P.get(c, 0);
  std::vector<float> got_c, ref_c, got_pad, old_pad;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      (j < N ? got_c : got_pad).push_back(got[at]);
      (j < N ? ref_c : old_pad).push_back(j < N ? ref[at] : C[at]);
    }
  std::ostringstream name;
  name << "gemm " << prec << " ta=" << ta << " tb=" << tb << " " << M << "x" << N << "x" << K
       << " alpha=" << alpha << " beta=" << beta;
  expect_equal(name.str() + " (padding of C untouched)", got_pad, old_pad);
  return expect_close(name.str(), got_c, ref_c, tol.atol, tol.rtol);
}

void gemm_suite(CudaPrecision p) {
  Pair P(p);
  const char* prec = precision_name(p);
  struct Size {
    int64_t M, N, K;
  };
  for (const Size& z : {Size{37, 53, 61}, Size{256, 512, 384}}) {
    double worst = 0;
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {-0.5f, 0.f}) {
          const double e = gemm_case(P, prec, gemm_tol(p, z.K), ta, tb, z.M, z.N, z.K, 0.75f, beta,
                                     100 + 10 * ta + 20 * tb);
          worst = std::max(worst, e);
        }
    MESSAGE("gemm " << std::string(prec) << " " << z.M << "x" << z.N << "x" << z.K
                    << ": largest |cuda - cpu| " << worst << " (atol " << gemm_tol(p, z.K).atol
                    << ")");
  }
  // K = 0: C = beta C exactly, nothing multiplied; beta 0 overwrites (NaN) with zeros.
  for (bool ta : {false, true})
    for (float beta : {0.5f, 0.f}) gemm_case(P, prec, kExact, ta, !ta, 5, 7, 0, 0.75f, beta, 300);
}

// ---- shapes -----------------------------------------------------------------------------------

Conv2dShape conv_shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S,
                       int64_t stride, int64_t pad) {
  return Conv2dShape{N,
                     C,
                     H,
                     W,
                     K,
                     R,
                     S,
                     stride,
                     stride,
                     pad,
                     pad,
                     (H + 2 * pad - R) / stride + 1,
                     (W + 2 * pad - S) / stride + 1};
}

Pool2dShape pool_shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t R, int64_t stride,
                       int64_t pad) {
  return Pool2dShape{N,
                     C,
                     H,
                     W,
                     R,
                     R,
                     stride,
                     stride,
                     pad,
                     pad,
                     (H + 2 * pad - R) / stride + 1,
                     (W + 2 * pad - R) / stride + 1};
}

size_t sz(int64_t v) { return static_cast<size_t>(v); }

}  // namespace

// ---- GEMM ------------------------------------------------------------------------------------

TEST_CASE("cuda vs cpu: gemm fp32") { gemm_suite(CudaPrecision::fp32); }

// The Linear layer's forward: cuBLASLt's bias epilogue against the CPU's gemm + add_bias, for
// each precision; C starts as NaN (overwritten, never read).
TEST_CASE("cuda vs cpu: gemm_bias (fused bias epilogue)") {
  for (CudaPrecision p : {CudaPrecision::fp32, CudaPrecision::tf32, CudaPrecision::bf16}) {
    Pair P(p);
    const int64_t M = 65, N = 130, K = 96;
    Twin x = P.upload(randf(sz(M * K), 41)), w = P.upload(randf(sz(N * K), 42)),
         b = P.upload(randf(sz(N), 43));
    Twin y = P.upload(nans(sz(M * N)));
    P.run([&](Backend& be, int s) {
      be.gemm_bias(false, true, M, N, K, x.f(s), K, w.f(s), K, b.f(s), y.f(s), N);
    });
    P.compare(std::string("gemm_bias ") + precision_name(p), y, gemm_tol(p, K));
  }
}
TEST_CASE("cuda vs cpu: gemm tf32") { gemm_suite(CudaPrecision::tf32); }
TEST_CASE("cuda vs cpu: gemm bf16") { gemm_suite(CudaPrecision::bf16); }

// ---- elementwise ------------------------------------------------------------------------------

TEST_CASE("cuda vs cpu: fill, add, axpy, scale") {
  Pair P;
  // Past the 65535 x 256 grid cap, so the grid-stride loops take more than one element per thread.
  const int64_t n = 65535LL * 256 + 4099;
  Twin a = P.upload(randf(sz(n), 1)), b = P.upload(randf(sz(n), 2)), y = P.upload(nans(sz(n)));
  P.run([&](Backend& be, int s) { be.fill(y.f(s), 2.5f, n); });
  P.compare("fill", y, kExact);
  P.run([&](Backend& be, int s) { be.add(a.f(s), b.f(s), y.f(s), n); });
  P.compare("add", y, kElementwise);
  P.run([&](Backend& be, int s) { be.add(a.f(s), b.f(s), a.f(s), n); });  // in place
  P.compare("add in place", a, kElementwise);
  P.run([&](Backend& be, int s) { be.axpy(-0.3f, b.f(s), y.f(s), n); });
  P.compare("axpy", y, kElementwise);
  P.run([&](Backend& be, int s) { be.scale(1.7f, y.f(s), n); });
  P.compare("scale", y, kElementwise);
}

TEST_CASE("cuda vs cpu: add_bias and sum_rows_accumulate") {
  Pair P;
  const int64_t rows = 33, cols = 70;
  Twin y = P.upload(randf(sz(rows * cols), 3)), bias = P.upload(randf(sz(cols), 4));
  P.run([&](Backend& be, int s) { be.add_bias(y.f(s), bias.f(s), rows, cols); });
  P.compare("add_bias", y, kElementwise);
  struct Case {
    int64_t rows, cols;
  };
  for (const Case& c : {Case{1000, 70}, Case{3, 1000}, Case{257, 33}}) {
    Twin x = P.upload(randf(sz(c.rows * c.cols), 5));
    Twin out = P.upload(randf(sz(c.cols), 6));  // accumulates onto what is there
    P.run([&](Backend& be, int s) { be.sum_rows_accumulate(x.f(s), out.f(s), c.rows, c.cols); });
    P.compare("sum_rows_accumulate " + std::to_string(c.rows) + "x" + std::to_string(c.cols), out,
              column_sums(c.rows));
  }
}

TEST_CASE("cuda vs cpu: activations forward and backward") {
  Pair P;
  const int64_t n = 100003;
  auto X = randf(sz(n), 7, -4.f, 4.f);
  const float special[] = {0.f, -0.f, 20.f, -20.f, 100.f, -100.f, 1e-20f, -1e-20f};
  std::copy(std::begin(special), std::end(special), X.begin());
  Twin x = P.upload(X), dy = P.upload(randf(sz(n), 8));
  const struct {
    Activation f;
    const char* name;
  } acts[] = {{Activation::relu, "relu"},
              {Activation::gelu_tanh, "gelu_tanh"},
              {Activation::gelu_erf, "gelu_erf"},
              {Activation::tanh, "tanh"}};
  for (const auto& a : acts) {
    Twin y = P.upload(nans(sz(n))), dx = P.upload(nans(sz(n)));
    P.run([&](Backend& be, int s) { be.activation_forward(a.f, x.f(s), y.f(s), n); });
    P.compare(std::string("activation_forward ") + a.name, y, kElementwise);
    P.mirror(y);  // tanh's backward reads y
    P.run([&](Backend& be, int s) {
      be.activation_backward(a.f, x.f(s), y.f(s), dy.f(s), dx.f(s), n);
    });
    P.compare(std::string("activation_backward ") + a.name, dx, kElementwise);
  }
}

TEST_CASE("cuda vs cpu: dropout masks are identical") {
  Pair P;
  const int64_t n = 100003;
  Twin x = P.upload(randf(sz(n), 9)), dy = P.upload(randf(sz(n), 10));
  for (float p : {0.1f, 0.5f}) {
    CAPTURE(p);
    const uint64_t key = hash_keys(42, static_cast<uint64_t>(p * 10));
    Twin y = P.upload(nans(sz(n))), dx = P.upload(nans(sz(n)));
    P.run([&](Backend& be, int s) {
      be.dropout_forward(x.f(s), y.f(s), n, p, key);
      be.dropout_backward(dy.f(s), dx.f(s), n, p, key);
    });
    // x and dy have no zeros, so an element is dropped iff its output is 0.
    auto mask = [](const std::vector<float>& v) {
      std::vector<int32_t> m(v.size());
      for (size_t i = 0; i < v.size(); ++i) m[i] = v[i] != 0.f;
      return m;
    };
    const auto m_cpu = mask(P.get(y, 0)), m_gpu = mask(P.get(y, 1));
    expect_equal("dropout_forward mask", m_gpu, m_cpu);
    expect_equal("dropout_backward mask", mask(P.get(dx, 1)), m_cpu);
    int64_t kept = 0;
    for (int32_t k : m_cpu) kept += k;
    CHECK(std::abs(static_cast<double>(kept) / static_cast<double>(n) - (1.0 - p)) < 0.01);
    P.compare("dropout_forward", y, kElementwise);
    P.compare("dropout_backward", dx, kElementwise);
  }
}

// ---- layernorm --------------------------------------------------------------------------------

TEST_CASE("cuda vs cpu: layernorm forward, backward_input, backward_weight") {
  Pair P;
  const int64_t rows = 70;
  for (int64_t cols : {33, 1000}) {
    CAPTURE(cols);
    const size_t n = sz(rows * cols);
    Twin x = P.upload(randf(n, 11, 1.f, 5.f)), gamma = P.upload(randf(sz(cols), 12, 0.5f, 1.5f)),
         beta = P.upload(randf(sz(cols), 13)), dy = P.upload(randf(n, 14));
    Twin y = P.upload(nans(n)), mean = P.upload(nans(sz(rows))), rstd = P.upload(nans(sz(rows)));
    P.run([&](Backend& be, int s) {
      be.layernorm_forward(x.f(s), gamma.f(s), beta.f(s), y.f(s), mean.f(s), rstd.f(s), rows, cols,
                           1e-5f);
    });
    P.compare("layernorm_forward y", y, {1e-5, 1e-5});
    P.compare("layernorm_forward mean", mean, {1e-6, 1e-5});
    P.compare("layernorm_forward rstd", rstd, {0, 1e-5});
    P.mirror(mean);
    P.mirror(rstd);
    Twin dx = P.upload(nans(n));
    P.run([&](Backend& be, int s) {
      be.layernorm_backward_input(dy.f(s), x.f(s), gamma.f(s), mean.f(s), rstd.f(s), dx.f(s), rows,
                                  cols);
    });
    P.compare("layernorm_backward_input", dx, {1e-5, 1e-4});
    Twin dgamma = P.upload(randf(sz(cols), 15)), dbeta = P.upload(randf(sz(cols), 16));
    P.run([&](Backend& be, int s) {
      be.layernorm_backward_weight(dy.f(s), x.f(s), mean.f(s), rstd.f(s), dgamma.f(s), dbeta.f(s),
                                   rows, cols);
    });
    P.compare("layernorm_backward_weight dgamma (accumulated)", dgamma, column_sums(rows));
    P.compare("layernorm_backward_weight dbeta (accumulated)", dbeta, column_sums(rows));
  }
}

// ---- losses -----------------------------------------------------------------------------------

TEST_CASE("cuda vs cpu: softmax cross-entropy forward, backward, bad labels") {
  Pair P;
  const int64_t rows = 50;
  for (int64_t classes : {10, 1000}) {
    CAPTURE(classes);
    const size_t n = sz(rows * classes);
    Twin logits = P.upload(randf(n, 17, -5.f, 5.f)), probs = P.upload(nans(n));
    const auto L = randi(sz(rows), 18, static_cast<int32_t>(classes));
    Twin labels = P.upload(L);
    double loss[2];
    P.run([&](Backend& be, int s) {
      loss[s] = be.softmax_xent_forward(logits.f(s), labels.i(s), probs.f(s), rows, classes);
    });
    INFO("softmax_xent_forward loss: cuda " << num(loss[1]) << ", cpu " << num(loss[0]));
    CHECK(std::abs(loss[1] - loss[0]) <= 1e-6 * std::abs(loss[0]));
    P.compare("softmax_xent_forward probs", probs, {1e-9, 1e-5});
    P.mirror(probs);
    Twin dlogits = P.upload(nans(n));
    P.run([&](Backend& be, int s) {
      be.softmax_xent_backward(probs.f(s), labels.i(s), dlogits.f(s), rows, classes,
                               1.f / static_cast<float>(rows));
    });
    P.compare("softmax_xent_backward", dlogits, kElementwise);
    // In place over the probabilities (as the loss layer runs it): the same bits on each side.
    P.run([&](Backend& be, int s) {
      be.softmax_xent_backward(probs.f(s), labels.i(s), probs.f(s), rows, classes,
                               1.f / static_cast<float>(rows));
    });
    for (int s = 0; s < 2; ++s)
      expect_equal("softmax_xent_backward in place", P.get(probs, s), P.get(dlogits, s));
    for (int32_t bad_label : {static_cast<int32_t>(classes), -1}) {
      auto B = L;
      B[7] = bad_label;
      P.set(labels, 0, B);
      P.set(labels, 1, B);
      CAPTURE(bad_label);
      CHECK_THROWS_AS(
          (void)P.cpu->softmax_xent_forward(logits.f(0), labels.i(0), probs.f(0), rows, classes),
          UsageError);
      CHECK_THROWS_AS(
          (void)P.gpu->softmax_xent_forward(logits.f(1), labels.i(1), probs.f(1), rows, classes),
          UsageError);
    }
  }
}

TEST_CASE("cuda vs cpu: mse forward and backward, count_correct") {
  Pair P;
  const int64_t n = 100003;
  Twin pred = P.upload(randf(sz(n), 19)), target = P.upload(randf(sz(n), 20));
  double loss[2];
  P.run([&](Backend& be, int s) { loss[s] = be.mse_forward(pred.f(s), target.f(s), n); });
  INFO("mse_forward: cuda " << num(loss[1]) << ", cpu " << num(loss[0]));
  CHECK(std::abs(loss[1] - loss[0]) <= 1e-10 * std::abs(loss[0]));
  Twin dpred = P.upload(nans(sz(n)));
  P.run([&](Backend& be, int s) {
    be.mse_backward(pred.f(s), target.f(s), dpred.f(s), n, 1.f / static_cast<float>(n));
  });
  P.compare("mse_backward", dpred, kElementwise);

  // Logits on a grid of 9 values give many ties: the first maximum must win on both.
  const int64_t rows = 517, classes = 10;
  auto X = randf(sz(rows * classes), 21);
  for (float& v : X) v = std::round(v * 4.f) / 4.f;
  auto L = randi(sz(rows), 22, static_cast<int32_t>(classes));
  int64_t want = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int32_t arg = 0;
    for (int32_t c = 1; c < classes; ++c)
      if (X[sz(r * classes + c)] > X[sz(r * classes + arg)]) arg = c;
    if (r % 2 == 0) L[sz(r)] = arg;  // half the rows right, so the count is not small
    want += L[sz(r)] == arg;
  }
  Twin logits = P.upload(X), labels = P.upload(L);
  int64_t count[2];
  P.run([&](Backend& be, int s) {
    count[s] = be.count_correct(logits.f(s), labels.i(s), rows, classes);
  });
  CHECK(count[0] == want);
  CHECK(count[1] == count[0]);
}

// The vocab-parallel cross-entropy's three ops, on rank 1 of 3 slices of the classes. Rows
// that test the edges: a tie on a grid (the first maximum), a slice all -inf (max -inf, sum 0),
// labels inside and outside the slice. Tolerances: max, arg-max and the label's logit are
// selections (exact); the slice's sum and the backward's exp(z - M) / S use expf against the
// CPU's exp_f32 and another sum order, as softmax probs ({1e-9, 1e-5}); softmax_combine is
// double arithmetic on the same inputs (exp and log within an ulp or two: 1e-12 relative on
// the loss; S is stored as a float, 1e-6) and exact selections.
TEST_CASE("cuda vs cpu: vocab-parallel softmax partials, combine, backward on a slice") {
  Pair P;
  const int64_t rows = 67, parts = 3;
  for (int64_t count : {7, 500}) {
    CAPTURE(count);
    const VocabRange range{count, count, parts * count};  // rank 1's classes
    auto X = randf(sz(rows * count), 41, -5.f, 5.f);
    for (int64_t c = 0; c < count; ++c) {
      X[sz(0 * count + c)] = -std::numeric_limits<float>::infinity();  // row 0: no number
      X[sz(1 * count + c)] = std::round(X[sz(1 * count + c)]);         // row 1: ties on a grid
    }
    auto L = randi(sz(rows), 42, static_cast<int32_t>(range.total));
    L[0] = 0;  // not in the all -inf slice (its logit would be -inf, the loss infinite)
    L[2] = static_cast<int32_t>(range.first);  // in the slice, at both ends
    L[3] = static_cast<int32_t>(range.first + count - 1);
    Twin logits = P.upload(X), labels = P.upload(L);
    Twin partials = P.upload(nans(sz(rows * kSoftmaxPartialFloats)));
    P.run([&](Backend& be, int s) {
      be.softmax_partials(logits.f(s), labels.i(s), partials.f(s), rows, range);
    });
    const auto got = P.get(partials, 1), ref = P.get(partials, 0);
    std::vector<float> got_sum, ref_sum, got_picked, ref_picked;
    for (size_t i = 0; i < got.size(); ++i) {
      const bool is_sum = i % kSoftmaxPartialFloats == 1;
      (is_sum ? got_sum : got_picked).push_back(got[i]);
      (is_sum ? ref_sum : ref_picked).push_back(ref[i]);
    }
    expect_equal("softmax_partials max, label logit, arg-max", got_picked, ref_picked);
    expect_close("softmax_partials sum of exponentials", got_sum, ref_sum, 1e-9, 1e-5);

    // All three slices' partials as the all-gather lays them out (the CPU's, on both sides).
    std::vector<float> gathered;
    for (int64_t p = 0; p < parts; ++p) {
      const auto Xp =
          p == 1 ? X : randf(sz(rows * count), 43 + static_cast<uint64_t>(p), -5.f, 5.f);
      Twin lp = P.upload(Xp), pp = P.upload(nans(sz(rows * kSoftmaxPartialFloats)));
      P.cpu->softmax_partials(lp.f(0), labels.i(0), pp.f(0), rows,
                              VocabRange{p * count, count, range.total});
      const auto host = P.get(pp, 0);
      gathered.insert(gathered.end(), host.begin(), host.end());
    }
    Twin all = P.upload(gathered), norm = P.upload(nans(sz(rows * 2)));
    SoftmaxTotals totals[2];
    P.run([&](Backend& be, int s) {
      totals[s] = be.softmax_combine(all.f(s), labels.i(s), norm.f(s), parts, rows);
    });
    INFO("softmax_combine loss: cuda " << num(totals[1].loss_sum) << ", cpu "
                                       << num(totals[0].loss_sum));
    CHECK(std::abs(totals[1].loss_sum - totals[0].loss_sum) <=
          1e-12 * std::abs(totals[0].loss_sum));
    CHECK(totals[1].correct == totals[0].correct);
    P.compare("softmax_combine norm (M, S)", norm, {0, 1e-6});  // S: a double rounded to float

    P.mirror(norm);
    Twin dlogits = P.upload(nans(sz(rows * count)));
    P.run([&](Backend& be, int s) {
      be.softmax_xent_backward_slice(logits.f(s), labels.i(s), norm.f(s), dlogits.f(s), rows, range,
                                     1.f / static_cast<float>(rows));
    });
    P.compare("softmax_xent_backward_slice", dlogits, {1e-9, 1e-5});

    auto B = L;
    B[5] = static_cast<int32_t>(range.total);  // a label past the whole vocabulary
    P.set(labels, 0, B);
    P.set(labels, 1, B);
    CHECK_THROWS_AS(P.cpu->softmax_partials(logits.f(0), labels.i(0), partials.f(0), rows, range),
                    UsageError);
    CHECK_THROWS_AS(P.gpu->softmax_partials(logits.f(1), labels.i(1), partials.f(1), rows, range),
                    UsageError);
  }
}

// ---- convolution and pooling ------------------------------------------------------------------

TEST_CASE("cuda vs cpu: conv2d forward, backward_input, backward_weight") {
  Pair P;
  for (const Conv2dShape& s :
       {conv_shape(2, 5, 11, 13, 6, 3, 3, 1, 1), conv_shape(2, 3, 17, 15, 8, 5, 5, 2, 0)}) {
    INFO("conv x (" << s.N << "," << s.C << "," << s.H << "," << s.W << ") w (" << s.K << "," << s.C
                    << "," << s.R << "," << s.S << ") stride " << s.stride_h << " pad " << s.pad_h);
    const size_t nx = sz(s.N * s.C * s.H * s.W), nw = sz(s.K * s.C * s.R * s.S),
                 ny = sz(s.N * s.K * s.P * s.Q);
    Twin x = P.upload(randf(nx, 23)), w = P.upload(randf(nw, 24)),
         bias = P.upload(randf(sz(s.K), 25)), dy = P.upload(randf(ny, 26));
    Twin y = P.upload(nans(ny));
    P.run([&](Backend& be, int i) { be.conv2d_forward(s, x.f(i), w.f(i), nullptr, y.f(i)); });
    P.compare("conv2d_forward", y, conv_tol(s.C * s.R * s.S));
    P.set(y, 0, nans(ny));
    P.set(y, 1, nans(ny));
    P.run([&](Backend& be, int i) { be.conv2d_forward(s, x.f(i), w.f(i), bias.f(i), y.f(i)); });
    P.compare("conv2d_forward with bias", y, conv_tol(s.C * s.R * s.S));
    Twin dx = P.upload(nans(nx));
    P.run([&](Backend& be, int i) { be.conv2d_backward_input(s, dy.f(i), w.f(i), dx.f(i)); });
    P.compare("conv2d_backward_input", dx, conv_tol(s.K * s.R * s.S));
    // Accumulates: onto random dw and dbias, then once more without dbias.
    Twin dw = P.upload(randf(nw, 27)), dbias = P.upload(randf(sz(s.K), 28));
    P.run([&](Backend& be, int i) {
      be.conv2d_backward_weight(s, dy.f(i), x.f(i), dw.f(i), dbias.f(i));
      be.conv2d_backward_weight(s, dy.f(i), x.f(i), dw.f(i), nullptr);
    });
    P.compare("conv2d_backward_weight dw (accumulated twice)", dw, conv_tol(2 * s.N * s.P * s.Q));
    P.compare("conv2d_backward_weight dbias (accumulated once)", dbias, conv_tol(s.N * s.P * s.Q));
  }
}

TEST_CASE("cuda vs cpu: maxpool2d forward (argmax exact) and backward") {
  Pair P;
  for (const Pool2dShape& s : {pool_shape(2, 3, 11, 9, 3, 2, 1), pool_shape(1, 4, 8, 8, 2, 2, 0)}) {
    INFO("maxpool x (" << s.N << "," << s.C << "," << s.H << "," << s.W << ") window " << s.R
                       << " stride " << s.stride_h << " pad " << s.pad_h);
    const size_t nx = sz(s.N * s.C * s.H * s.W), ny = sz(s.N * s.C * s.P * s.Q);
    auto X = randf(nx, 29);
    for (float& v : X) v = std::round(v * 8.f) / 8.f;  // ties: the first maximum must win
    Twin x = P.upload(X), y = P.upload(nans(ny)), arg = P.upload(std::vector<int32_t>(ny, -7));
    P.run([&](Backend& be, int i) { be.maxpool2d_forward(s, x.f(i), y.f(i), arg.i(i)); });
    P.compare("maxpool2d_forward y", y, kExact);
    P.compare_ints("maxpool2d_forward argmax", arg);
    P.mirror(arg);
    Twin dy = P.upload(randf(ny, 30)), dx = P.upload(nans(nx));
    P.run([&](Backend& be, int i) { be.maxpool2d_backward(s, dy.f(i), arg.i(i), dx.f(i)); });
    P.compare("maxpool2d_backward", dx, kElementwise);
  }
}

TEST_CASE("cuda vs cpu: avgpool2d forward and backward (with padding)") {
  Pair P;
  for (const Pool2dShape& s : {pool_shape(2, 3, 11, 9, 3, 2, 1), pool_shape(1, 2, 10, 7, 4, 3, 2),
                               pool_shape(1, 4, 8, 8, 2, 2, 0)}) {
    INFO("avgpool x (" << s.N << "," << s.C << "," << s.H << "," << s.W << ") window " << s.R
                       << " stride " << s.stride_h << " pad " << s.pad_h);
    const size_t nx = sz(s.N * s.C * s.H * s.W), ny = sz(s.N * s.C * s.P * s.Q);
    Twin x = P.upload(randf(nx, 31)), y = P.upload(nans(ny));
    P.run([&](Backend& be, int i) { be.avgpool2d_forward(s, x.f(i), y.f(i)); });
    P.compare("avgpool2d_forward", y, kElementwise);
    Twin dy = P.upload(randf(ny, 32)), dx = P.upload(nans(nx));
    P.run([&](Backend& be, int i) { be.avgpool2d_backward(s, dy.f(i), dx.f(i)); });
    P.compare("avgpool2d_backward", dx, kElementwise);
  }
}

// ---- embedding --------------------------------------------------------------------------------

TEST_CASE("cuda vs cpu: embedding forward, backward_weight, bad ids") {
  Pair P;
  const int64_t vocab = 50, dim = 37, n = 300;  // 300 ids from 50: every id repeats
  auto ids = randi(sz(n), 33, static_cast<int32_t>(vocab));
  ids[0] = 0;
  ids[1] = static_cast<int32_t>(vocab - 1);
  Twin id = P.upload(ids), table = P.upload(randf(sz(vocab * dim), 34)),
       y = P.upload(nans(sz(n * dim)));
  P.run([&](Backend& be, int s) {
    be.embedding_forward(id.i(s), table.f(s), y.f(s), n, dim, vocab);
  });
  P.compare("embedding_forward", y, kExact);
  Twin dy = P.upload(randf(sz(n * dim), 35)), dtable = P.upload(randf(sz(vocab * dim), 36));
  P.run([&](Backend& be, int s) {
    be.embedding_backward_weight(id.i(s), dy.f(s), dtable.f(s), n, dim);
  });
  // Each row's additions in position order, as the CPU's: the same bits (no float atomics).
  P.compare("embedding_backward_weight (accumulated, repeated ids)", dtable, kExact);
  for (int32_t bad : {static_cast<int32_t>(vocab), -1}) {
    CAPTURE(bad);
    auto B = ids;
    B[sz(n - 3)] = bad;
    P.set(id, 0, B);
    P.set(id, 1, B);
    CHECK_THROWS_AS(P.cpu->embedding_forward(id.i(0), table.f(0), y.f(0), n, dim, vocab),
                    UsageError);
    CHECK_THROWS_AS(P.gpu->embedding_forward(id.i(1), table.f(1), y.f(1), n, dim, vocab),
                    UsageError);
  }
}

// A vocab-parallel embedding's rows [first, first + count) of the table: ids in the slice read
// their row, the others zeros (exact); the gradient scatters only the slice's ids.
TEST_CASE("cuda vs cpu: embedding on a slice of the table (vocab-parallel), bad ids") {
  Pair P;
  const int64_t dim = 37, n = 300;
  const VocabRange range{20, 10, 50};  // rows 20..29 of 50
  auto ids = randi(sz(n), 37, static_cast<int32_t>(range.total));
  ids[0] = 20;  // both ends of the slice, and just outside them
  ids[1] = 29;
  ids[2] = 19;
  ids[3] = 30;
  Twin id = P.upload(ids), table = P.upload(randf(sz(range.count * dim), 38)),
       y = P.upload(nans(sz(n * dim)));
  P.run([&](Backend& be, int s) {
    be.embedding_forward_slice(id.i(s), table.f(s), y.f(s), n, dim, range);
  });
  P.compare("embedding_forward_slice", y, kExact);
  Twin dy = P.upload(randf(sz(n * dim), 39)), dtable = P.upload(randf(sz(range.count * dim), 40));
  P.run([&](Backend& be, int s) {
    be.embedding_backward_weight_slice(id.i(s), dy.f(s), dtable.f(s), n, dim, range);
  });
  P.compare("embedding_backward_weight_slice (accumulated, repeated ids)", dtable, kExact);
  for (int32_t bad : {static_cast<int32_t>(range.total), -1}) {
    CAPTURE(bad);
    auto B = ids;
    B[sz(n - 3)] = bad;
    P.set(id, 0, B);
    P.set(id, 1, B);
    CHECK_THROWS_AS(P.cpu->embedding_forward_slice(id.i(0), table.f(0), y.f(0), n, dim, range),
                    UsageError);
    CHECK_THROWS_AS(P.gpu->embedding_forward_slice(id.i(1), table.f(1), y.f(1), n, dim, range),
                    UsageError);
  }
}

// ---- attention --------------------------------------------------------------------------------

TEST_CASE("cuda vs cpu: attention forward and backward") {
  Pair P;
  struct Dims {
    int64_t B, T, H, Dh;
  };
  for (const Dims& d :
       {Dims{2, 1, 1, 8}, Dims{2, 17, 3, 16}, Dims{1, 64, 2, 64}, Dims{1, 33, 1, 128}}) {
    INFO("attention B=" << d.B << " T=" << d.T << " H=" << d.H << " Dh=" << d.Dh);
    const size_t n_out = sz(d.B * d.T * d.H * d.Dh), n_lse = sz(d.B * d.H * d.T);
    const float scale = 1.f / std::sqrt(static_cast<float>(d.Dh));
    Twin qkv = P.upload(randf(3 * n_out, 37, -2.f, 2.f)), dout = P.upload(randf(n_out, 38));
    Twin out = P.upload(nans(n_out)), lse = P.upload(nans(n_lse)), dqkv = P.upload(nans(3 * n_out));
    P.run([&](Backend& be, int s) {
      be.attention_forward(qkv.f(s), out.f(s), lse.f(s), d.B, d.T, d.H, d.Dh, scale);
    });
    P.compare("attention_forward out", out, kAttention);
    P.compare("attention_forward lse", lse, kAttention);
    P.mirror(out);
    P.mirror(lse);
    P.run([&](Backend& be, int s) {
      be.attention_backward(qkv.f(s), out.f(s), dout.f(s), lse.f(s), dqkv.f(s), d.B, d.T, d.H, d.Dh,
                            scale);
    });
    P.compare("attention_backward dqkv", dqkv, kAttention);
  }
}

// ---- reductions and optimizers ----------------------------------------------------------------

TEST_CASE("cuda vs cpu: sum_squares and all_finite") {
  Pair P;
  for (int64_t n : {int64_t{1}, int64_t{1000}, (int64_t{1} << 20) + 5}) {
    CAPTURE(n);
    auto X = randf(sz(n), 39, -3.f, 3.f);
    Twin x = P.upload(X);
    double ss[2];
    bool finite[2];
    P.run([&](Backend& be, int s) {
      ss[s] = be.sum_squares(x.f(s), n);
      finite[s] = be.all_finite(x.f(s), n);
    });
    INFO("sum_squares: cuda " << num(ss[1]) << ", cpu " << num(ss[0]));
    CHECK(std::abs(ss[1] - ss[0]) <= 1e-10 * ss[0]);
    CHECK(finite[0]);
    CHECK(finite[1]);
    for (float bad :
         {kNaN, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
      for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
        auto B = X;
        B[sz(at)] = bad;
        P.set(x, 0, B);
        P.set(x, 1, B);
        INFO("all_finite with " << bad << " at " << at);
        CHECK_FALSE(P.cpu->all_finite(x.f(0), n));
        CHECK_FALSE(P.gpu->all_finite(x.f(1), n));
      }
  }
}

TEST_CASE("cuda: sum_squares_each gives sum_squares' bits for every tensor, in one wait") {
  auto gpu = make_cuda_backend(0, 0, CudaPrecision::fp32);
  const std::vector<int64_t> ns{1, 0, 1000, (int64_t{1} << 20) + 5, 77};
  std::vector<Tensor> xs;
  std::vector<const float*> ptrs;
  for (size_t k = 0; k < ns.size(); ++k) {
    const auto host = randf(sz(std::max<int64_t>(ns[k], 1)), 70 + k, -3.f, 3.f);
    xs.push_back(gpu->empty(Shape{std::max<int64_t>(ns[k], 1)}));
    gpu->copy_from_host(xs.back().data(), host.data(), host.size() * sizeof(float));
    ptrs.push_back(xs.back().f32());
  }
  std::vector<double> each(ns.size(), kNaN);
  gpu->sum_squares_each(ptrs.data(), ns.data(), ns.size(), each.data());
  for (size_t k = 0; k < ns.size(); ++k) {
    CAPTURE(k);
    const double one = gpu->sum_squares(ptrs[k], ns[k]);
    CHECK(std::memcmp(&each[k], &one, sizeof(double)) == 0);
  }
  CHECK(each[1] == 0.0);
  CHECK(each[3] > 0.0);
}

TEST_CASE("cuda vs cpu: sgd_update (momentum, nesterov, weight decay, first step)") {
  Pair P;
  const int64_t n = 100003;
  struct Config {
    float momentum;
    bool nesterov;
    float dampening;
  };
  for (const Config& c : {Config{0.9f, false, 0.f}, Config{0.9f, true, 0.f},
                          Config{0.9f, false, 0.1f}, Config{0.f, false, 0.f}}) {
    INFO("sgd momentum " << c.momentum << " nesterov " << c.nesterov << " dampening "
                         << c.dampening);
    Twin param = P.upload(randf(sz(n), 40)), buf = P.upload(nans(sz(n))),
         out = P.upload(nans(sz(n)));
    SgdParams sp;
    sp.lr = 0.05f;
    sp.momentum = c.momentum;
    sp.dampening = c.dampening;
    sp.weight_decay = 1e-2f;
    sp.nesterov = c.nesterov;
    for (int step = 0; step < 2; ++step) {
      sp.first_step = step == 0;  // the buffer starts as NaN: the first step must not read it
      Twin grad = P.upload(randf(sz(n), 41 + static_cast<uint64_t>(step)));
      // The first step in place, the second into another buffer (2BW's update over the stash).
      Twin& to = step == 0 ? param : out;
      P.run([&](Backend& be, int s) {
        be.sgd_update(param.f(s), grad.f(s), to.f(s), c.momentum != 0.f ? buf.f(s) : nullptr, n,
                      sp);
      });
      const std::string at = " step " + std::to_string(step + 1);
      P.compare("sgd_update param" + at, to, kElementwise);
      if (c.momentum != 0.f) P.compare("sgd_update momentum buffer" + at, buf, kElementwise);
    }
  }
}

TEST_CASE("cuda vs cpu: adamw_update, two steps") {
  Pair P;
  const int64_t n = 100003;
  Twin param = P.upload(randf(sz(n), 43)), m = P.upload(std::vector<float>(sz(n), 0.f)),
       v = P.upload(std::vector<float>(sz(n), 0.f)), out = P.upload(nans(sz(n)));
  AdamWParams ap;
  ap.lr = 1e-2f;
  ap.weight_decay = 0.1f;
  for (int64_t step = 1; step <= 2; ++step) {
    ap.step = step;
    Twin grad = P.upload(randf(sz(n), 44 + static_cast<uint64_t>(step), -2.f, 2.f));
    Twin& to = step == 1 ? param : out;  // in place, then into another buffer
    P.run([&](Backend& be, int s) {
      be.adamw_update(param.f(s), grad.f(s), to.f(s), m.f(s), v.f(s), n, ap);
    });
    const std::string at = " step " + std::to_string(step);
    P.compare("adamw_update param" + at, to, kElementwise);
    P.compare("adamw_update m" + at, m, kElementwise);
    P.compare("adamw_update v" + at, v, {1e-12, 1e-6});
  }
}

// ---- memory and copies ------------------------------------------------------------------------

TEST_CASE("cuda memory: accounting, peak, limit") {
  auto gpu = make_cuda_backend(0, 0, CudaPrecision::fp32);
  const size_t base = gpu->memory_stats().current_bytes;  // the backend's own workspaces
  gpu->reset_peak();
  CHECK(gpu->memory_stats().peak_bytes == base);
  void* a = gpu->allocate(1000);
  void* b = gpu->allocate(size_t{3} << 20);
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  CHECK(a != b);
  CHECK(gpu->memory_stats().current_bytes == base + 1000 + (size_t{3} << 20));
  // The memory is usable device memory.
  const auto data = randf(250, 50);
  std::vector<float> back(250);
  gpu->copy_from_host(a, data.data(), 1000);
  gpu->copy_to_host(back.data(), a, 1000);
  expect_equal("round trip through allocate()d memory", back, data);
  gpu->deallocate(b, size_t{3} << 20);
  CHECK(gpu->memory_stats().current_bytes == base + 1000);
  CHECK(gpu->memory_stats().peak_bytes == base + 1000 + (size_t{3} << 20));
  gpu->reset_peak();
  CHECK(gpu->memory_stats().peak_bytes == base + 1000);
  {
    Tensor t = gpu->empty(Shape{256, 1024});
    CHECK(gpu->memory_stats().current_bytes == base + 1000 + (size_t{1} << 20));
  }
  CHECK(gpu->memory_stats().current_bytes == base + 1000);

  const size_t limit = base + 1000 + (size_t{1} << 20);
  gpu->set_memory_limit(limit);
  CHECK(gpu->memory_stats().limit_bytes == limit);
  std::string message;
  try {
    (void)gpu->allocate(size_t{2} << 20);
  } catch (const OutOfMemory& e) {
    message = e.what();
  }
  INFO("OutOfMemory message: " << message);
  CHECK(message.find("cuda:0") != std::string::npos);
  CHECK(message.find(std::to_string(size_t{2} << 20)) != std::string::npos);
  CHECK_THROWS_AS((void)gpu->empty(Shape{1 << 19}), OutOfMemory);  // 2 MiB
  CHECK(gpu->memory_stats().current_bytes == base + 1000);         // failures changed nothing
  void* c = gpu->allocate(size_t{1} << 20);  // exactly up to the limit is fine
  CHECK(gpu->memory_stats().current_bytes == limit);
  gpu->deallocate(c, size_t{1} << 20);
  gpu->set_memory_limit(0);
  void* d = gpu->allocate(size_t{64} << 20);
  gpu->deallocate(d, size_t{64} << 20);
  gpu->deallocate(a, 1000);
  CHECK(gpu->memory_stats().current_bytes == base);
}

TEST_CASE("cuda memory: copy_within") {
  auto gpu = make_cuda_backend(0, 0, CudaPrecision::fp32);
  const auto src = randf(1000, 51);
  std::vector<float> want(1000, 0.f);
  Tensor s = gpu->empty(Shape{1000}), d = gpu->zeros(Shape{1000});
  gpu->copy_from_host(s.data(), src.data(), 4000);
  gpu->copy_within(d.f32() + 100, s.f32() + 200, 300 * sizeof(float));
  gpu->copy_within(s.f32(), s.f32() + 900, 100 * sizeof(float));  // within one buffer, disjoint
  std::copy(src.begin() + 200, src.begin() + 500, want.begin() + 100);
  auto src2 = src;
  std::copy(src.begin() + 900, src.end(), src2.begin());
  std::vector<float> got_d(1000), got_s(1000);
  gpu->synchronize();
  gpu->copy_to_host(got_d.data(), d.data(), 4000);
  gpu->copy_to_host(got_s.data(), s.data(), 4000);
  expect_equal("copy_within into another buffer", got_d, want);
  expect_equal("copy_within inside one buffer", got_s, src2);
}

namespace {

std::vector<float> download(Backend& be, const Tensor& t) {
  std::vector<float> host(sz(t.numel()));
  be.synchronize();
  be.copy_to_host(host.data(), t.data(), t.bytes());
  return host;
}

// 64 MiB from `from` to `to` and back (Backend::copy_to into given memory: the peer copy, or
// through the host for GPUs without peer access), and into a new tensor: all exact.
void peer_round_trip(Backend& from, Backend& to, const std::string& what) {
  const int64_t n = int64_t{16} << 20;
  const auto data = randf(sz(n), 52);
  Tensor a = from.empty(Shape{n}), b = to.empty(Shape{n}), back = from.empty(Shape{n});
  from.copy_from_host(a.data(), data.data(), a.bytes());
  from.copy_to(to, b.data(), a.data(), a.bytes());
  to.copy_to(from, back.data(), b.data(), b.bytes());
  expect_equal(what + ": copy there", download(to, b), data);
  expect_equal(what + ": copy there and back", download(from, back), data);
  Tensor c = from.copy_to(to, a);
  CHECK(c.backend() == &to);
  CHECK(c.device() == to.device());
  expect_equal(what + ": Backend::copy_to", download(to, c), data);
}

}  // namespace

TEST_CASE("cuda copies: slot to slot on one GPU, and to and from the CPU") {
  auto gpu0 = make_cuda_backend(0, 0, CudaPrecision::fp32);
  auto gpu1 = make_cuda_backend(0, 1, CudaPrecision::fp32);
  auto cpu = make_cpu_backend(0, 1);
  peer_round_trip(*gpu0, *gpu1, "cuda:0 slot 0 -> slot 1");
  {
    Tensor x = gpu0->zeros(Shape{4}), y = gpu1->empty(Shape{4});
    CHECK(gpu0->copy_to_peer(*gpu1, y.data(), x.data(),
                             x.bytes()));  // slots of one GPU reach each other
  }

  const int64_t n = (int64_t{1} << 20) + 3;
  const auto data = randf(sz(n), 53);
  Tensor g = gpu0->empty(Shape{n}), h = cpu->empty(Shape{n});
  gpu0->copy_from_host(g.data(), data.data(), g.bytes());
  CHECK_FALSE(
      gpu0->copy_to_peer(*cpu, h.data(), g.data(), g.bytes()));  // not its kind: copy_to stages
  gpu0->copy_to(*cpu, h.data(), g.data(), g.bytes());            // into host memory
  std::vector<float> got(sz(n));
  std::memcpy(got.data(), h.data(), h.bytes());
  expect_equal("cuda:0 -> cpu:0 copy_to (raw)", got, data);
  Tensor h2 = gpu0->copy_to(*cpu, g);
  std::memcpy(got.data(), h2.data(), h2.bytes());
  expect_equal("cuda:0 -> cpu:0 Backend::copy_to", got, data);
  Tensor g2 = cpu->copy_to(*gpu1, h);  // and back up, to the other slot
  expect_equal("cpu:0 -> cuda:0 slot 1 Backend::copy_to", download(*gpu1, g2), data);
}

TEST_CASE("cuda copies: cuda:0 -> cuda:1") {
  if (cuda_status().devices.size() < 2) {
    MESSAGE("skipped: this machine has " << cuda_status().devices.size()
                                         << " GPU; the cross-GPU copy needs two");
    return;
  }
  auto gpu0 = make_cuda_backend(0, 0, CudaPrecision::fp32);
  auto gpu1 = make_cuda_backend(1, 0, CudaPrecision::fp32);
  peer_round_trip(*gpu0, *gpu1, "cuda:0 -> cuda:1");
  peer_round_trip(*gpu1, *gpu0, "cuda:1 -> cuda:0");
}
