// Convolution (oneDNN primitives) against direct double-precision loops: odd sizes, stride 2,
// padding 1, a stride that does not divide evenly, non-square kernels; accumulation of the
// weight gradients.
#include <doctest/doctest.h>

#include "engine/core/error.h"
#include "tests/kernels/kernel_test_util.h"

using namespace pt;
using namespace pt::test;

namespace {

Conv2dShape conv_shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S,
                       int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  return Conv2dShape{
      N, C, H, W, K, R, S, sh, sw, ph, pw, (H + 2 * ph - R) / sh + 1, (W + 2 * pw - S) / sw + 1};
}

size_t x_index(const Conv2dShape& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return static_cast<size_t>(((n * s.C + c) * s.H + h) * s.W + w);
}
size_t w_index(const Conv2dShape& s, int64_t k, int64_t c, int64_t r, int64_t q) {
  return static_cast<size_t>(((k * s.C + c) * s.R + r) * s.S + q);
}
size_t y_index(const Conv2dShape& s, int64_t n, int64_t k, int64_t p, int64_t q) {
  return static_cast<size_t>(((n * s.K + k) * s.P + p) * s.Q + q);
}

// Calls f(n, k, p, q, c, r, t, h, w) for every product term x(n,c,h,w) w(k,c,r,t) -> y(n,k,p,q).
template <class F>
void for_each_tap(const Conv2dShape& s, F f) {
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t k = 0; k < s.K; ++k)
      for (int64_t p = 0; p < s.P; ++p)
        for (int64_t q = 0; q < s.Q; ++q)
          for (int64_t c = 0; c < s.C; ++c)
            for (int64_t r = 0; r < s.R; ++r)
              for (int64_t t = 0; t < s.S; ++t) {
                const int64_t h = p * s.stride_h - s.pad_h + r, w = q * s.stride_w - s.pad_w + t;
                if (h >= 0 && h < s.H && w >= 0 && w < s.W) f(n, k, p, q, c, r, t, h, w);
              }
}

}  // namespace

TEST_CASE("conv2d forward, backward_input, backward_weight") {
  CpuBackend be(0, 1);
  const Conv2dShape shapes[] = {
      conv_shape(2, 3, 7, 9, 5, 3, 3, 2, 2, 1, 1),    // stride 2, padding 1, odd sizes
      conv_shape(3, 2, 6, 5, 4, 3, 3, 2, 2, 0, 0),    // stride leaves a row over (pad_r = -1)
      conv_shape(1, 4, 5, 8, 3, 2, 3, 1, 2, 0, 1),    // non-square kernel, mixed strides
      conv_shape(2, 1, 28, 28, 8, 5, 5, 1, 1, 2, 2),  // LeNet-like "same" conv
  };
  for (const Conv2dShape& s : shapes) {
    CAPTURE(s.N);
    CAPTURE(s.H);
    CAPTURE(s.W);
    CAPTURE(s.stride_h);
    const size_t nx = x_index(s, s.N, 0, 0, 0), nw = w_index(s, s.K, 0, 0, 0),
                 ny = y_index(s, s.N, 0, 0, 0);
    const auto X = random_floats(nx, 1), Wt = random_floats(nw, 2), Bias = random_floats(s.K, 3),
               DY = random_floats(ny, 4);

    std::vector<double> y(ny, 0.0), dx(nx, 0.0), dw(nw, 0.0), db(s.K, 0.0);
    for_each_tap(s, [&](int64_t n, int64_t k, int64_t p, int64_t q, int64_t c, int64_t r, int64_t t,
                        int64_t h, int64_t w) {
      y[y_index(s, n, k, p, q)] += double(X[x_index(s, n, c, h, w)]) * Wt[w_index(s, k, c, r, t)];
      dx[x_index(s, n, c, h, w)] += double(DY[y_index(s, n, k, p, q)]) * Wt[w_index(s, k, c, r, t)];
      dw[w_index(s, k, c, r, t)] += double(DY[y_index(s, n, k, p, q)]) * X[x_index(s, n, c, h, w)];
    });
    std::vector<double> y_bias = y;
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t k = 0; k < s.K; ++k)
        for (int64_t i = 0; i < s.P * s.Q; ++i) {
          y_bias[y_index(s, n, k, 0, 0) + static_cast<size_t>(i)] += Bias[k];
          db[k] += DY[y_index(s, n, k, 0, 0) + static_cast<size_t>(i)];
        }

    Floats x(be, X), w(be, Wt), bias(be, Bias), dy(be, DY), out(be, ny, 0.f);
    be.conv2d_forward(s, x.get(), w.get(), nullptr, out.get());
    check_close(out.read(), y, 1e-5, 1e-4, "conv2d_forward");
    be.conv2d_forward(s, x.get(), w.get(), bias.get(), out.get());
    check_close(out.read(), y_bias, 1e-5, 1e-4, "conv2d_forward with bias");

    Floats gx(be, nx, 123.f);  // overwritten
    be.conv2d_backward_input(s, dy.get(), w.get(), gx.get());
    check_close(gx.read(), dx, 1e-5, 1e-4, "conv2d_backward_input");

    // Weight and bias gradients accumulate: start from G0, call twice.
    const auto G0 = random_floats(nw, 5), B0 = random_floats(s.K, 6);
    Floats gw(be, G0), gb(be, B0), gw_only(be, G0);
    for (int call = 1; call <= 2; ++call) {
      be.conv2d_backward_weight(s, dy.get(), x.get(), gw.get(), gb.get());
      std::vector<double> want_w(nw), want_b(s.K);
      for (size_t i = 0; i < nw; ++i) want_w[i] = G0[i] + call * dw[i];
      for (int64_t k = 0; k < s.K; ++k) want_b[k] = B0[k] + call * db[k];
      check_close(gw.read(), want_w, 1e-4, 1e-4, "conv2d_backward_weight dw");
      check_close(gb.read(), want_b, 1e-4, 1e-4, "conv2d_backward_weight dbias");
    }
    be.conv2d_backward_weight(s, dy.get(), x.get(), gw_only.get(), nullptr);  // no bias
    std::vector<double> want_w(nw);
    for (size_t i = 0; i < nw; ++i) want_w[i] = G0[i] + dw[i];
    check_close(gw_only.read(), want_w, 1e-4, 1e-4, "conv2d_backward_weight without bias");
    // Scratch memory (oneDNN scratchpads, the weight-gradient staging) is returned: only the
    // test's own buffers are live.
    CHECK(be.memory_stats().current_bytes ==
          sizeof(float) * (2 * nx + 3 * nw + 2 * ny + 2 * static_cast<size_t>(s.K)));
  }
}

TEST_CASE("conv2d: an inconsistent output size is a shape error") {
  CpuBackend be(0, 1);
  Conv2dShape s = conv_shape(1, 1, 5, 5, 1, 3, 3, 1, 1, 0, 0);
  s.P = 4;  // should be 3
  std::vector<float> buf(100, 0.f);
  CHECK_THROWS_AS(be.conv2d_forward(s, buf.data(), buf.data(), nullptr, buf.data()), ShapeError);
}
