// Causal multi-head attention (attention_forward / attention_backward) against a naive
// double-precision reference that builds the full (T, T) softmax of every head. Sizes cross the
// kernel's tiles (4 query rows, 16 keys and 16 head columns per vector, 4 vectors per register
// tile, 32 query rows per backward step): T = 1, T below a tile, T a multiple, T not a multiple,
// head sizes that are not a multiple of 16 and one over 4 vectors. Tolerance: |got - ref| <=
// 2e-5 + 2e-4 |ref| (fp32 sums over up to T terms); NaN fails.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/kernels/kernel_test_util.h"

using namespace pt;
using namespace pt::test;

namespace {

struct AttentionDims {
  int64_t B, T, H, Dh;
};

struct AttentionRef {
  std::vector<double> out, lse, dqkv;
};

// qkv (B, T, 3, H, Dh), dout (B, T, H, Dh).
AttentionRef attention_ref(const std::vector<float>& qkv, const std::vector<float>& dout,
                           const AttentionDims& s, double scale) {
  const int64_t d = s.H * s.Dh;
  AttentionRef r;
  r.out.assign(static_cast<size_t>(s.B * s.T * d), 0.0);
  r.lse.assign(static_cast<size_t>(s.B * s.H * s.T), 0.0);
  r.dqkv.assign(qkv.size(), 0.0);
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h) {
    return static_cast<size_t>(((b * s.T + t) * 3 + part) * d + h * s.Dh);
  };
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.T; ++i) {
        // p_j = softmax_j(scale q_i . k_j), j <= i
        std::vector<double> p(static_cast<size_t>(i + 1));
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < s.Dh; ++c)
            dot += double(qkv[at(b, i, 0, h) + c]) * qkv[at(b, j, 1, h) + c];
          p[j] = scale * dot;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (double& v : p) sum += (v = std::exp(v - mx));
        for (double& v : p) v /= sum;
        r.lse[static_cast<size_t>((b * s.H + h) * s.T + i)] = mx + std::log(sum);
        const size_t o = static_cast<size_t>((b * s.T + i) * d + h * s.Dh);
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t c = 0; c < s.Dh; ++c) r.out[o + c] += p[j] * qkv[at(b, j, 2, h) + c];
        // dp_j = dout_i . v_j;  ds_j = p_j (dp_j - sum_k p_k dp_k)
        std::vector<double> dp(static_cast<size_t>(i + 1));
        double pdp = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < s.Dh; ++c) dot += double(dout[o + c]) * qkv[at(b, j, 2, h) + c];
          dp[j] = dot;
          pdp += p[j] * dot;
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - pdp);
          for (int64_t c = 0; c < s.Dh; ++c) {
            r.dqkv[at(b, i, 0, h) + c] += scale * ds * qkv[at(b, j, 1, h) + c];
            r.dqkv[at(b, j, 1, h) + c] += scale * ds * qkv[at(b, i, 0, h) + c];
            r.dqkv[at(b, j, 2, h) + c] += p[j] * dout[o + c];
          }
        }
      }
  return r;
}

struct AttentionRun {
  std::vector<float> out, lse, dqkv;
};

AttentionRun run_attention(Backend& be, const std::vector<float>& QKV, const std::vector<float>& DO,
                           const AttentionDims& s, float scale) {
  const size_t n_out = static_cast<size_t>(s.B * s.T * s.H * s.Dh);
  Floats qkv(be, QKV), dout(be, DO), out(be, n_out, 0.f),
      lse(be, static_cast<size_t>(s.B * s.H * s.T), 0.f);
  // dqkv starts as NaN: the op must overwrite every element.
  Floats dqkv(be, QKV.size(), std::numeric_limits<float>::quiet_NaN());
  be.attention_forward(qkv.get(), out.get(), lse.get(), s.B, s.T, s.H, s.Dh, scale);
  be.attention_backward(qkv.get(), out.get(), dout.get(), lse.get(), dqkv.get(), s.B, s.T, s.H,
                        s.Dh, scale);
  return {out.read(), lse.read(), dqkv.read()};
}

}  // namespace

TEST_CASE("attention forward and backward match the full-softmax reference") {
  CpuBackend be(0, 1);
  const AttentionDims cases[] = {
      {1, 1, 1, 4},     // T = 1: each row attends to itself only
      {2, 5, 3, 8},     // T below both blocks
      {1, 64, 2, 16},   // T a multiple of both blocks
      {2, 97, 2, 64},   // crosses query and key blocks, not a multiple; GPT head size
      {1, 130, 1, 5},   // three key blocks, odd head size
      {1, 33, 1, 20},   // one past a backward step; head size padded to 32
      {3, 17, 2, 16},   // one past a vector of keys
      {1, 40, 1, 144},  // head of 9 vectors: column tiles of 4, 4 and 1
  };
  for (const AttentionDims& s : cases) {
    CAPTURE(s.B);
    CAPTURE(s.T);
    CAPTURE(s.H);
    CAPTURE(s.Dh);
    const size_t n_qkv = static_cast<size_t>(s.B * s.T * 3 * s.H * s.Dh);
    const auto QKV = random_floats(n_qkv, 11, -2.f, 2.f);
    const auto DO = random_floats(n_qkv / 3, 12);
    const float scale = 1.f / std::sqrt(static_cast<float>(s.Dh));
    const AttentionRef ref = attention_ref(QKV, DO, s, scale);
    const AttentionRun got = run_attention(be, QKV, DO, s, scale);
    check_close(got.out, ref.out, 2e-5, 2e-4, "attention_forward out");
    check_close(got.lse, ref.lse, 2e-5, 2e-4, "attention_forward lse");
    check_close(got.dqkv, ref.dqkv, 2e-5, 2e-4, "attention_backward dqkv");
  }
}

TEST_CASE("attention is stable for large scores (online softmax subtracts the running max)") {
  CpuBackend be(0, 1);
  const AttentionDims s{1, 70, 2, 8};
  const size_t n_qkv = static_cast<size_t>(s.B * s.T * 3 * s.H * s.Dh);
  const auto QKV = random_floats(n_qkv, 21, -30.f, 30.f);  // scores up to ~2500
  const auto DO = random_floats(n_qkv / 3, 22);
  const AttentionRef ref = attention_ref(QKV, DO, s, 1.0);
  const AttentionRun got = run_attention(be, QKV, DO, s, 1.f);
  // A score of size |s| carries a float rounding of ~|s| 2^-24 (~1e-4 here), and so does each
  // probability, relatively: bound the error relative to the largest value of each tensor.
  auto largest = [](const std::vector<double>& v) {
    double m = 0;
    for (double x : v) m = std::max(m, std::abs(x));
    return m;
  };
  check_close(got.out, ref.out, 2e-5 * largest(ref.out), 1e-4, "out");
  check_close(got.lse, ref.lse, 0, 1e-5, "lse");
  check_close(got.dqkv, ref.dqkv, 2e-5 * largest(ref.dqkv), 1e-3, "dqkv");
  for (float v : got.dqkv) REQUIRE(std::isfinite(v));
}

TEST_CASE("attention gives the same bits on 1 and 2 threads") {
  CpuBackend one(0, 1), two(1, 2);
  const AttentionDims s{3, 150, 4, 16};  // enough work to use the second thread
  const size_t n_qkv = static_cast<size_t>(s.B * s.T * 3 * s.H * s.Dh);
  const auto QKV = random_floats(n_qkv, 31, -2.f, 2.f);
  const auto DO = random_floats(n_qkv / 3, 32);
  const AttentionRun a = run_attention(one, QKV, DO, s, 0.25f);
  const AttentionRun b = run_attention(two, QKV, DO, s, 0.25f);
  CHECK(same_bits(a.out, b.out));
  CHECK(same_bits(a.lse, b.lse));
  CHECK(same_bits(a.dqkv, b.dqkv));
}

TEST_CASE("attention rows depend only on earlier positions (causal)") {
  CpuBackend be(0, 1);
  const AttentionDims s{1, 80, 2, 8};
  const size_t n_qkv = static_cast<size_t>(s.B * s.T * 3 * s.H * s.Dh);
  auto QKV = random_floats(n_qkv, 41, -2.f, 2.f);
  const auto DO = random_floats(n_qkv / 3, 42);
  const AttentionRun a = run_attention(be, QKV, DO, s, 0.3f);
  const int64_t t = 40, row = 3 * s.H * s.Dh;
  for (size_t i = static_cast<size_t>((t + 1) * row); i < QKV.size(); ++i) QKV[i] += 1.f;
  const AttentionRun b = run_attention(be, QKV, DO, s, 0.3f);
  const size_t keep = static_cast<size_t>((t + 1) * s.H * s.Dh);  // rows 0 .. t of out
  CHECK(
      std::equal(a.out.begin(), a.out.begin() + static_cast<std::ptrdiff_t>(keep), b.out.begin()));
  CHECK_FALSE(std::equal(a.out.begin(), a.out.end(), b.out.begin()));
  // dq of row i depends on k_j, v_j for j <= i only: bit-identical for rows 0 .. t, changed after.
  const int64_t d = s.H * s.Dh;
  for (int64_t i = 0; i < s.T; ++i) {
    const auto q0 = static_cast<std::ptrdiff_t>(i * row);  // the q part of row i
    CAPTURE(i);
    CHECK(std::equal(a.dqkv.begin() + q0, a.dqkv.begin() + q0 + d, b.dqkv.begin() + q0) ==
          (i <= t));
  }
}

TEST_CASE("a non-finite value reaches only the positions the causal mask lets it reach") {
  // Tiles span several query rows and keys; the kernel must not multiply a masked zero by a
  // later position's inf or NaN (0 x inf = NaN), in the forward or the backward.
  CpuBackend be(0, 1);
  const AttentionDims s{1, 70, 1, 16};
  const size_t n_qkv = static_cast<size_t>(s.B * s.T * 3 * s.H * s.Dh);
  const auto QKV = random_floats(n_qkv, 61, -2.f, 2.f);
  const auto DO = random_floats(n_qkv / 3, 62);
  const AttentionRun a = run_attention(be, QKV, DO, s, 0.25f);
  const int64_t row = 3 * s.Dh, d = s.Dh;
  auto rows_equal = [&](const std::vector<float>& x, const std::vector<float>& y, int64_t i,
                        int64_t stride, int64_t offset) {
    const auto o = static_cast<std::ptrdiff_t>(i * stride + offset);
    return std::equal(x.begin() + o, x.begin() + o + d, y.begin() + o);
  };
  for (const int64_t t : {1, 18, 34, 35}) {  // first, middle and last rows of 4-row tiles
    CAPTURE(t);
    // inf in k_t and NaN in v_t: rows before t, forward and dq, are unchanged.
    auto bad = QKV;
    bad[static_cast<size_t>(t * row + d)] = std::numeric_limits<float>::infinity();
    bad[static_cast<size_t>(t * row + 2 * d + 3)] = std::numeric_limits<float>::quiet_NaN();
    const AttentionRun b = run_attention(be, bad, DO, s, 0.25f);
    for (int64_t i = 0; i < t; ++i) {
      CAPTURE(i);
      CHECK(rows_equal(a.out, b.out, i, d, 0));
      CHECK(rows_equal(a.dqkv, b.dqkv, i, row, 0));
    }
    // NaN in dout_t: dq of every other row, dk and dv of every later key are unchanged.
    auto bad_grad = DO;
    bad_grad[static_cast<size_t>(t * d + 5)] = std::numeric_limits<float>::quiet_NaN();
    const AttentionRun c = run_attention(be, QKV, bad_grad, s, 0.25f);
    for (int64_t i = 0; i < s.T; ++i) {
      CAPTURE(i);
      if (i != t) CHECK(rows_equal(a.dqkv, c.dqkv, i, row, 0));
      if (i > t) CHECK(rows_equal(a.dqkv, c.dqkv, i, row, d));
      if (i > t) CHECK(rows_equal(a.dqkv, c.dqkv, i, row, 2 * d));
    }
  }
}
