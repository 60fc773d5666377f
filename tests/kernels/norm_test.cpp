// Layer normalisation against a double-precision reference (biased variance, eps inside sqrt).
#include <doctest/doctest.h>

#include <cmath>

#include "tests/kernels/kernel_test_util.h"

using namespace pt;
using namespace pt::test;

namespace {

struct LayerNormRef {
  std::vector<double> y, mean, rstd, dx, dgamma, dbeta;
};

LayerNormRef layernorm_ref(const std::vector<float>& X, const std::vector<float>& G,
                           const std::vector<float>& Bt, const std::vector<float>& DY, int64_t rows,
                           int64_t cols, double eps) {
  LayerNormRef r;
  r.y.resize(X.size());
  r.dx.resize(X.size());
  r.dgamma.assign(static_cast<size_t>(cols), 0.0);
  r.dbeta.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = &X[static_cast<size_t>(i * cols)];
    const float* dy = &DY[static_cast<size_t>(i * cols)];
    double mu = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mu += x[c];
    mu /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) var += (x[c] - mu) * (x[c] - mu);
    var /= static_cast<double>(cols);  // biased
    const double rs = 1 / std::sqrt(var + eps);
    r.mean.push_back(mu);
    r.rstd.push_back(rs);
    // dx = rs * (g - mean(g) - xhat mean(g xhat)), g = dy gamma.
    double mg = 0, mgx = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (x[c] - mu) * rs, g = double(dy[c]) * G[c];
      r.y[i * cols + c] = xhat * G[c] + Bt[c];
      mg += g;
      mgx += g * xhat;
      r.dgamma[c] += dy[c] * xhat;
      r.dbeta[c] += dy[c];
    }
    mg /= static_cast<double>(cols);
    mgx /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (x[c] - mu) * rs;
      r.dx[i * cols + c] = rs * (double(dy[c]) * G[c] - mg - xhat * mgx);
    }
  }
  return r;
}

}  // namespace

TEST_CASE("layernorm forward, backward_input, backward_weight (accumulates)") {
  CpuBackend be(0, 1);
  for (int64_t cols : {1, 7, 300}) {
    CAPTURE(cols);
    const int64_t rows = 13;
    const size_t n = static_cast<size_t>(rows * cols);
    auto X = random_floats(n, 1, -2.f, 3.f);
    const auto G = random_floats(cols, 2, 0.5f, 1.5f), B = random_floats(cols, 3),
               DY = random_floats(n, 4);
    const float eps = 1e-5f;
    const auto ref = layernorm_ref(X, G, B, DY, rows, cols, eps);

    Floats x(be, X), g(be, G), b(be, B), y(be, n, 0.f), mean(be, rows, 0.f), rstd(be, rows, 0.f);
    be.layernorm_forward(x.get(), g.get(), b.get(), y.get(), mean.get(), rstd.get(), rows, cols,
                         eps);
    check_close(y.read(), ref.y, 1e-5, 1e-5, "layernorm_forward y");
    check_close(mean.read(), ref.mean, 1e-6, 1e-6, "layernorm_forward mean");
    check_close(rstd.read(), ref.rstd, 0, 1e-5, "layernorm_forward rstd");

    Floats dy(be, DY), dx(be, n, 0.f);
    be.layernorm_backward_input(dy.get(), x.get(), g.get(), mean.get(), rstd.get(), dx.get(), rows,
                                cols);
    check_close(dx.read(), ref.dx, 1e-5, 1e-4, "layernorm_backward_input");

    // dgamma/dbeta start non-zero and accumulate over two calls.
    const auto G0 = random_floats(cols, 5), B0 = random_floats(cols, 6);
    Floats dg(be, G0), db(be, B0);
    for (int call = 1; call <= 2; ++call) {
      be.layernorm_backward_weight(dy.get(), x.get(), mean.get(), rstd.get(), dg.get(), db.get(),
                                   rows, cols);
      std::vector<double> want_g(cols), want_b(cols);
      for (int64_t c = 0; c < cols; ++c) {
        want_g[c] = G0[c] + call * ref.dgamma[c];
        want_b[c] = B0[c] + call * ref.dbeta[c];
      }
      check_close(dg.read(), want_g, 1e-5, 1e-5, "layernorm_backward_weight dgamma");
      check_close(db.read(), want_b, 1e-5, 1e-5, "layernorm_backward_weight dbeta");
    }
  }
}

TEST_CASE("layernorm: a constant row normalises to beta (variance 0, eps keeps it finite)") {
  CpuBackend be(0, 1);
  Floats x(be, std::vector<float>(8, 3.f)), g(be, 8, 2.f), b(be, 8, 0.5f), y(be, 8, 0.f),
      mean(be, 1, 0.f), rstd(be, 1, 0.f);
  be.layernorm_forward(x.get(), g.get(), b.get(), y.get(), mean.get(), rstd.get(), 1, 8, 1e-5f);
  check_close(y.read(), std::vector<double>(8, 0.5), 0, 0, "constant row");
  check_close(rstd.read(), {1 / std::sqrt(1e-5)}, 0, 1e-5, "constant row rstd");
}
