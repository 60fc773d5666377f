// Reductions and optimizer updates: SGD variants and AdamW for two steps against values worked
// out by hand from the formulas in backend.h (PyTorch semantics), plus vector checks.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "engine/core/error.h"
#include "tests/kernels/kernel_test_util.h"

using namespace pt;
using namespace pt::test;

TEST_CASE("sum_squares and all_finite") {
  CpuBackend be(0, 1);
  const size_t n = 50001;
  const auto X = random_floats(n, 1, -3.f, 3.f);
  double want = 0;
  for (float x : X) want += double(x) * x;
  Floats x(be, X);
  CHECK(be.sum_squares(x.get(), static_cast<int64_t>(n)) == doctest::Approx(want).epsilon(1e-13));
  CHECK(be.sum_squares(x.get(), 0) == 0.0);
  CHECK(be.all_finite(x.get(), static_cast<int64_t>(n)));
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    auto Y = X;
    Y[n - 7] = bad;
    Floats y(be, Y);
    CHECK_FALSE(be.all_finite(y.get(), static_cast<int64_t>(n)));
    CHECK(be.all_finite(y.get(), static_cast<int64_t>(n - 7)));  // the bad element is outside
  }
  Floats big(be, {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()});
  CHECK(be.all_finite(big.get(), 2));
}

namespace {

// One parameter p = 1 trained for two steps with gradients 0.5 then -0.25, lr 0.1.
struct SgdCase {
  const char* name;
  SgdParams params;
  float after1, after2;
};

}  // namespace

TEST_CASE("sgd: two steps against hand-computed values") {
  SgdParams plain;
  plain.lr = 0.1f;
  SgdParams momentum = plain;
  momentum.momentum = 0.9f;
  SgdParams nesterov = momentum;
  nesterov.nesterov = true;
  SgdParams decay = momentum;
  decay.weight_decay = 0.1f;
  decay.dampening = 0.5f;
  const SgdCase cases[] = {
      // p = 1 - 0.1*0.5 = 0.95; p = 0.95 + 0.1*0.25 = 0.975
      {"plain", plain, 0.95f, 0.975f},
      // buf = 0.5, p = 0.95; buf = 0.9*0.5 - 0.25 = 0.2, p = 0.95 - 0.02 = 0.93
      {"momentum", momentum, 0.95f, 0.93f},
      // buf = 0.5, g = 0.5 + 0.45 = 0.95, p = 0.905; buf = 0.2, g = -0.25 + 0.18 = -0.07, p = 0.912
      {"nesterov", nesterov, 0.905f, 0.912f},
      // g = 0.5 + 0.1*1 = 0.6, buf = 0.6 (first step: no dampening), p = 0.94;
      // g = -0.25 + 0.1*0.94 = -0.156, buf = 0.54 + 0.5*-0.156 = 0.462, p = 0.94 - 0.0462 = 0.8938
      {"weight decay + dampening", decay, 0.94f, 0.8938f},
  };
  CpuBackend be(0, 1);
  for (const SgdCase& c : cases) {
    CAPTURE(c.name);
    Floats p(be, {1.f}), g(be, {0.5f}), buf(be, {12345.f});  // buf garbage: first step sets it
    SgdParams params = c.params;
    params.first_step = true;
    float* buf_ptr = params.momentum != 0.f ? buf.get() : nullptr;
    be.sgd_update(p.get(), g.get(), p.get(), buf_ptr, 1, params);
    CHECK(p.read()[0] == doctest::Approx(c.after1).epsilon(1e-6));
    params.first_step = false;
    be.copy_from_host(g.get(), std::vector<float>{-0.25f}.data(), sizeof(float));
    be.sgd_update(p.get(), g.get(), p.get(), buf_ptr, 1, params);
    CHECK(p.read()[0] == doctest::Approx(c.after2).epsilon(1e-6));
  }
}

TEST_CASE("sgd: momentum without a buffer is a usage error") {
  CpuBackend be(0, 1);
  Floats p(be, {1.f}), g(be, {1.f});
  SgdParams params;
  params.momentum = 0.9f;
  CHECK_THROWS_AS(be.sgd_update(p.get(), g.get(), p.get(), nullptr, 1, params), UsageError);
}

TEST_CASE("sgd: vector update matches the formula (not first step, nesterov, decay, dampening)") {
  CpuBackend be(0, 1);
  const size_t n = 100003;  // above the parallel threshold
  const auto P = random_floats(n, 1), G = random_floats(n, 2), B = random_floats(n, 3);
  SgdParams sp;
  sp.lr = 0.05f;
  sp.momentum = 0.8f;
  sp.dampening = 0.25f;
  sp.weight_decay = 0.01f;
  sp.nesterov = true;
  sp.first_step = false;
  std::vector<double> wp(n), wb(n);
  for (size_t i = 0; i < n; ++i) {
    const double g = G[i] + 0.01 * P[i];
    wb[i] = 0.8 * B[i] + 0.75 * g;
    wp[i] = P[i] - 0.05 * (g + 0.8 * wb[i]);
  }
  Floats p(be, P), g(be, G), b(be, B);
  be.sgd_update(p.get(), g.get(), p.get(), b.get(), static_cast<int64_t>(n), sp);
  check_close(p.read(), wp, 1e-6, 1e-6, "sgd param");
  check_close(b.read(), wb, 1e-6, 1e-6, "sgd momentum buffer");
}

TEST_CASE("adamw: two steps against hand-computed values") {
  // lr 0.1, betas (0.9, 0.999), eps 1e-8, wd 0.01; p = 1, g = 0.5 then -0.25.
  // Step 1: p = 0.999; m = 0.05, v = 0.00025; m^ = 0.5, v^ = 0.25;
  //         p = 0.999 - 0.1*0.5/(0.5 + 1e-8) = 0.899000002.
  // Step 2: p = 0.899000002*0.999 = 0.898101002; m = 0.045 - 0.025 = 0.02,
  //         v = 0.00024975 + 0.0000625 = 0.00031225; m^ = 0.02/0.19 = 0.105263158,
  //         v^ = 0.00031225/0.001999 = 0.156203102, sqrt = 0.395225382;
  //         p = 0.898101002 - 0.1*0.105263158/0.395225392 = 0.871467299.
  CpuBackend be(0, 1);
  AdamWParams ap;
  ap.lr = 0.1f;
  ap.beta1 = 0.9f;
  ap.beta2 = 0.999f;
  ap.eps = 1e-8f;
  ap.weight_decay = 0.01f;
  Floats p(be, {1.f}), g(be, {0.5f}), m(be, {0.f}), v(be, {0.f});
  ap.step = 1;
  be.adamw_update(p.get(), g.get(), p.get(), m.get(), v.get(), 1, ap);
  CHECK(p.read()[0] == doctest::Approx(0.899000002).epsilon(1e-6));
  CHECK(m.read()[0] == doctest::Approx(0.05).epsilon(1e-6));
  CHECK(v.read()[0] == doctest::Approx(0.00025).epsilon(1e-6));
  ap.step = 2;
  be.copy_from_host(g.get(), std::vector<float>{-0.25f}.data(), sizeof(float));
  be.adamw_update(p.get(), g.get(), p.get(), m.get(), v.get(), 1, ap);
  CHECK(p.read()[0] == doctest::Approx(0.871467299).epsilon(1e-6));
  CHECK(m.read()[0] == doctest::Approx(0.02).epsilon(1e-6));
  CHECK(v.read()[0] == doctest::Approx(0.00031225).epsilon(1e-6));

  ap.step = 0;
  CHECK_THROWS_AS(be.adamw_update(p.get(), g.get(), p.get(), m.get(), v.get(), 1, ap), UsageError);
}

TEST_CASE("adamw: vector update matches the formula") {
  CpuBackend be(0, 1);
  const size_t n = 100003;
  const auto P = random_floats(n, 1), G = random_floats(n, 2), M = random_floats(n, 3, -0.1f, 0.1f),
             V = random_floats(n, 4, 0.f, 0.01f);
  AdamWParams ap;
  ap.lr = 3e-3f;
  ap.weight_decay = 0.1f;
  ap.step = 7;
  std::vector<double> wp(n), wm(n), wv(n);
  const double b1 = ap.beta1, b2 = ap.beta2;
  for (size_t i = 0; i < n; ++i) {
    wm[i] = b1 * M[i] + (1 - b1) * G[i];
    wv[i] = b2 * V[i] + (1 - b2) * double(G[i]) * G[i];
    const double mh = wm[i] / (1 - std::pow(b1, 7)), vh = wv[i] / (1 - std::pow(b2, 7));
    wp[i] = P[i] * (1 - double(ap.lr) * ap.weight_decay) -
            double(ap.lr) * mh / (std::sqrt(vh) + double(ap.eps));
  }
  Floats p(be, P), g(be, G), m(be, M), v(be, V);
  be.adamw_update(p.get(), g.get(), p.get(), m.get(), v.get(), static_cast<int64_t>(n), ap);
  check_close(m.read(), wm, 1e-7, 1e-5, "adamw m");
  check_close(v.read(), wv, 1e-9, 1e-5, "adamw v");
  check_close(p.read(), wp, 1e-6, 1e-5, "adamw param");
}

TEST_CASE("adamw nesterov: the look-ahead step matches the formula, in place and out of place") {
  // Dozat's form (op_params.h): p -= (lr b1 m / (1 - b1^(t+1)) + lr (1 - b1) g / (1 - b1^t)) /
  // (sqrt(v / (1 - b2^t)) + eps); m, v as plain AdamW's. Differs from plain AdamW's step.
  CpuBackend be(0, 1);
  const size_t n = 4099;
  const auto P = random_floats(n, 5), G = random_floats(n, 6), M = random_floats(n, 7, -0.1f, 0.1f),
             V = random_floats(n, 8, 0.f, 0.01f);
  AdamWParams ap;
  ap.lr = 3e-3f;
  ap.weight_decay = 0.1f;
  ap.step = 3;
  ap.nesterov = true;
  std::vector<double> wp(n), plain(n);
  const double b1 = ap.beta1, b2 = ap.beta2, lr = ap.lr;
  for (size_t i = 0; i < n; ++i) {
    const double m = b1 * M[i] + (1 - b1) * G[i];
    const double v = b2 * V[i] + (1 - b2) * double(G[i]) * G[i];
    const double denom = std::sqrt(v / (1 - std::pow(b2, 3))) + double(ap.eps);
    const double decayed = P[i] * (1 - lr * ap.weight_decay);
    wp[i] = decayed -
            (lr * b1 * m / (1 - std::pow(b1, 4)) + lr * (1 - b1) * G[i] / (1 - std::pow(b1, 3))) /
                denom;
    plain[i] = decayed - lr * m / (1 - std::pow(b1, 3)) / denom;
  }
  Floats p(be, P), g(be, G), m(be, M), v(be, V);
  be.adamw_update(p.get(), g.get(), p.get(), m.get(), v.get(), static_cast<int64_t>(n), ap);
  check_close(p.read(), wp, 1e-6, 1e-5, "adamw nesterov param");
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += std::abs(wp[i] - plain[i]) > 1e-5 ? 1 : 0;
  CHECK(differ > n / 2);  // the check above could not pass with the plain step
  // Out of place: the same bits, the input untouched.
  Floats p2(be, P), m2(be, M), v2(be, V), out(be, P);
  be.adamw_update(p2.get(), g.get(), out.get(), m2.get(), v2.get(), static_cast<int64_t>(n), ap);
  CHECK(out.read() == p.read());
  CHECK(p2.read() == P);
}

// PipeDream-2BW writes the new version into the stash instead of copying the latest there and
// updating it in place: the out-of-place update must give the in-place bits, leave its input as
// it was, and refuse buffers that overlap without being the same.
TEST_CASE("sgd and adamw out of place: the in-place bits, the input untouched") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    CpuBackend be(0, threads);
    const size_t n = 100003;  // above the parallel threshold
    const auto n64 = static_cast<int64_t>(n);
    const auto P = random_floats(n, 11), G = random_floats(n, 12), B = random_floats(n, 13),
               V = random_floats(n, 14, 0.f, 0.01f);
    for (int kind = 0; kind < 3; ++kind) {  // SGD without momentum, SGD with nesterov, AdamW
      CAPTURE(kind);
      SgdParams sp;
      sp.lr = 0.05f;
      sp.weight_decay = 0.01f;
      sp.momentum = kind == 1 ? 0.9f : 0.f;
      sp.nesterov = kind == 1;
      sp.first_step = false;
      AdamWParams ap;
      ap.step = 3;
      auto update = [&](float* param, float* out, Floats& m, Floats& v) {
        const Floats g(be, G);
        if (kind < 2)
          be.sgd_update(param, g.get(), out, kind == 1 ? m.get() : nullptr, n64, sp);
        else
          be.adamw_update(param, g.get(), out, m.get(), v.get(), n64, ap);
      };
      Floats in_place(be, P), m1(be, B), v1(be, V);
      update(in_place.get(), in_place.get(), m1, v1);
      Floats from(be, P), to(be, std::vector<float>(n, std::nanf(""))), m2(be, B), v2(be, V);
      update(from.get(), to.get(), m2, v2);
      const auto want = in_place.read(), got = to.read(), source = from.read();
      CHECK(want != P);    // the update moved something
      CHECK(got == want);  // vectors of floats: NaN anywhere is unequal
      CHECK(source == P);
      CHECK(m2.read() == m1.read());
      CHECK(v2.read() == v1.read());
    }
  }
}

TEST_CASE("sgd and adamw: an output that overlaps the input without being it is a usage error") {
  CpuBackend be(0, 1);
  Floats p(be, std::vector<float>(8, 1.f)), g(be, std::vector<float>(8, 0.5f)),
      m(be, std::vector<float>(8, 0.f)), v(be, std::vector<float>(8, 0.f));
  SgdParams sp;
  AdamWParams ap;
  try {
    be.sgd_update(p.get(), g.get(), p.get() + 1, nullptr, 4, sp);
    FAIL("no error");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("sgd_update: param_out overlaps param") != std::string::npos);
  }
  CHECK_THROWS_AS(be.adamw_update(p.get() + 3, g.get(), p.get(), m.get(), v.get(), 4, ap),
                  UsageError);
  // Adjacent is not overlapping.
  be.sgd_update(p.get(), g.get(), p.get() + 4, nullptr, 4, sp);
  CHECK(p.read()[4] != 1.f);
  CHECK(p.read()[0] == 1.f);
}
