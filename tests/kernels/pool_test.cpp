// Max and average pooling against direct references: argmax indices, first maximum wins,
// count_include_pad, backward overwrites dx.
#include <doctest/doctest.h>

#include <limits>

#include "tests/kernels/kernel_test_util.h"

using namespace pt;
using namespace pt::test;

namespace {

Pool2dShape pool_shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t R, int64_t S, int64_t sh,
                       int64_t sw, int64_t ph, int64_t pw) {
  return Pool2dShape{
      N, C, H, W, R, S, sh, sw, ph, pw, (H + 2 * ph - R) / sh + 1, (W + 2 * pw - S) / sw + 1};
}

}  // namespace

TEST_CASE("maxpool2d and avgpool2d forward and backward") {
  CpuBackend be(0, 1);
  const Pool2dShape shapes[] = {
      pool_shape(2, 3, 7, 9, 3, 3, 2, 2, 1, 1),  // overlapping windows, padding 1, odd sizes
      pool_shape(1, 2, 8, 6, 2, 2, 2, 2, 0, 0),  // the usual 2x2 / 2
      pool_shape(2, 1, 5, 7, 3, 2, 1, 2, 1, 0),  // non-square window, mixed strides
  };
  for (const Pool2dShape& s : shapes) {
    CAPTURE(s.H);
    CAPTURE(s.R);
    const int64_t planes = s.N * s.C, in_plane = s.H * s.W, out_plane = s.P * s.Q;
    const size_t nx = static_cast<size_t>(planes * in_plane),
                 ny = static_cast<size_t>(planes * out_plane);
    const auto X = random_floats(nx, 1), DY = random_floats(ny, 2);

    std::vector<double> ymax(ny), yavg(ny), dxmax(nx, 0.0), dxavg(nx, 0.0), arg(ny);
    for (int64_t b = 0; b < planes; ++b)
      for (int64_t p = 0; p < s.P; ++p)
        for (int64_t q = 0; q < s.Q; ++q) {
          const size_t o = static_cast<size_t>(b * out_plane + p * s.Q + q);
          double best = -1e300, sum = 0;
          int64_t best_at = -1;
          for (int64_t r = 0; r < s.R; ++r)
            for (int64_t t = 0; t < s.S; ++t) {
              const int64_t h = p * s.stride_h - s.pad_h + r, w = q * s.stride_w - s.pad_w + t;
              if (h < 0 || h >= s.H || w < 0 || w >= s.W) continue;
              const double v = X[static_cast<size_t>(b * in_plane + h * s.W + w)];
              sum += v;
              if (v > best) {
                best = v;
                best_at = h * s.W + w;
              }
            }
          ymax[o] = best;
          arg[o] = static_cast<double>(best_at);
          yavg[o] = sum / static_cast<double>(s.R * s.S);  // count_include_pad
          dxmax[static_cast<size_t>(b * in_plane + best_at)] += DY[o];
          for (int64_t r = 0; r < s.R; ++r)
            for (int64_t t = 0; t < s.S; ++t) {
              const int64_t h = p * s.stride_h - s.pad_h + r, w = q * s.stride_w - s.pad_w + t;
              if (h >= 0 && h < s.H && w >= 0 && w < s.W)
                dxavg[static_cast<size_t>(b * in_plane + h * s.W + w)] += DY[o] / double(s.R * s.S);
            }
        }

    Floats x(be, X), dy(be, DY), y(be, ny, 0.f);
    Ints argmax(be, ny, 0);
    be.maxpool2d_forward(s, x.get(), y.get(), argmax.get());
    check_close(y.read(), ymax, 0, 0, "maxpool2d_forward");
    const auto got_arg = argmax.read();
    check_close(std::vector<float>(got_arg.begin(), got_arg.end()), arg, 0, 0, "maxpool2d argmax");

    Floats dx(be, nx, 99.f);  // backward overwrites, it does not add
    be.maxpool2d_backward(s, dy.get(), argmax.get(), dx.get());
    check_close(dx.read(), dxmax, 1e-6, 1e-6, "maxpool2d_backward");

    be.avgpool2d_forward(s, x.get(), y.get());
    check_close(y.read(), yavg, 1e-6, 1e-5, "avgpool2d_forward");
    be.fill(dx.get(), 99.f, static_cast<int64_t>(nx));
    be.avgpool2d_backward(s, dy.get(), dx.get());
    check_close(dx.read(), dxavg, 1e-6, 1e-5, "avgpool2d_backward");
  }
}

TEST_CASE("maxpool2d: ties go to the first element in window order") {
  CpuBackend be(0, 1);
  const Pool2dShape s = pool_shape(1, 1, 2, 4, 2, 2, 2, 2, 0, 0);  // two 2x2 windows
  Floats x(be, {1, 5, 5, 2, /**/ 5, 0, 2, 2}), y(be, 2, 0.f);
  Ints argmax(be, 2, 0);
  be.maxpool2d_forward(s, x.get(), y.get(), argmax.get());
  CHECK(argmax.read() == std::vector<int32_t>{1, 2});  // (0,1) before (1,0); (0,2) before others
  CHECK(y.read() == std::vector<float>{5, 5});
}

TEST_CASE("avgpool2d: padding counts in the divisor") {
  CpuBackend be(0, 1);
  const Pool2dShape s =
      pool_shape(1, 1, 2, 2, 3, 3, 1, 1, 1, 1);  // every window covers all 4 inputs
  Floats x(be, {1, 2, 3, 4}), y(be, 4, 0.f);
  be.avgpool2d_forward(s, x.get(), y.get());
  check_close(y.read(), std::vector<double>(4, 10.0 / 9.0), 0, 1e-6, "avgpool count_include_pad");
}
