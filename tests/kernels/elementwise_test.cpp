// Elementwise ops, bias add and bias-gradient reduction, activations and dropout against
// double-precision references.
#include <doctest/doctest.h>

#include <cmath>

#include "tests/kernels/kernel_test_util.h"

using namespace pt;
using namespace pt::test;

TEST_CASE("fill, add, axpy, scale") {
  CpuBackend be(0, 1);
  const size_t n = 1001;
  const auto A = random_floats(n, 1), B = random_floats(n, 2);
  Floats a(be, A), b(be, B), y(be, n, 0.f);

  be.fill(y.get(), 2.5f, static_cast<int64_t>(n));
  check_close(y.read(), std::vector<double>(n, 2.5), 0, 0, "fill");

  be.add(a.get(), b.get(), y.get(), static_cast<int64_t>(n));
  std::vector<double> ref(n);
  for (size_t i = 0; i < n; ++i) ref[i] = double(A[i]) + B[i];
  check_close(y.read(), ref, 0, 1e-7, "add");

  be.add(a.get(), b.get(), a.get(), static_cast<int64_t>(n));  // in place (y aliases a)
  check_close(a.read(), ref, 0, 1e-7, "add in place");

  Floats x(be, A), z(be, B);
  be.axpy(-0.5f, x.get(), z.get(), static_cast<int64_t>(n));
  for (size_t i = 0; i < n; ++i) ref[i] = double(B[i]) - 0.5 * A[i];
  check_close(z.read(), ref, 1e-7, 1e-6, "axpy");

  be.scale(3.f, x.get(), static_cast<int64_t>(n));
  for (size_t i = 0; i < n; ++i) ref[i] = 3.0 * A[i];
  check_close(x.read(), ref, 0, 1e-7, "scale");
}

TEST_CASE("add_bias and sum_rows_accumulate") {
  CpuBackend be(0, 1);
  const int64_t rows = 67, cols = 300;  // cols spans two column blocks
  const auto X = random_floats(rows * cols, 3), Bias = random_floats(cols, 4);
  Floats x(be, X), bias(be, Bias);
  be.add_bias(x.get(), bias.get(), rows, cols);
  std::vector<double> ref(X.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) ref[r * cols + c] = double(X[r * cols + c]) + Bias[c];
  check_close(x.read(), ref, 0, 1e-7, "add_bias");

  // out += column sums; starting from a non-zero out, then again (accumulates).
  Floats in(be, X), out(be, Bias);
  be.sum_rows_accumulate(in.get(), out.get(), rows, cols);
  std::vector<double> sums(cols, 0.0), once(cols), twice(cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) sums[c] += X[r * cols + c];
  for (int64_t c = 0; c < cols; ++c) {
    once[c] = Bias[c] + sums[c];
    twice[c] = Bias[c] + 2 * sums[c];
  }
  check_close(out.read(), once, 1e-5, 1e-5, "sum_rows_accumulate");
  be.sum_rows_accumulate(in.get(), out.get(), rows, cols);
  check_close(out.read(), twice, 2e-5, 1e-5, "sum_rows_accumulate twice");
}

namespace {

double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double forward_ref(Activation f, double x) {
  switch (f) {
    case Activation::relu: return x > 0 ? x : 0;
    case Activation::gelu_erf: return gelu_erf(x);
    case Activation::gelu_tanh: return gelu_tanh(x);
    case Activation::tanh: return std::tanh(x);
  }
  return 0;
}
// Analytic derivatives, written independently of the kernel's factoring.
double derivative_ref(Activation f, double x) {
  switch (f) {
    case Activation::relu: return x > 0 ? 1 : 0;
    case Activation::gelu_erf:
      return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
             x * std::exp(-x * x / 2) / std::sqrt(2 * M_PI);
    case Activation::gelu_tanh: {
      const double k = std::sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
      const double t = std::tanh(u);
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
    }
    case Activation::tanh: {
      const double t = std::tanh(x);
      return 1 - t * t;
    }
  }
  return 0;
}

}  // namespace

TEST_CASE("activations forward and backward") {
  CpuBackend be(0, 1);
  const size_t n = 2000;
  auto X = random_floats(n, 5, -6.f, 6.f);
  // Zeros and far tails (where exp over- or underflows inside the formulas).
  const float special[] = {0.f, -0.f, 9.f, -9.f, 30.f, -30.f, 100.f, -100.f, 1e4f, -1e4f};
  for (size_t i = 0; i < std::size(special); ++i) X[i] = special[i];
  const auto DY = random_floats(n, 6);
  for (Activation f :
       {Activation::relu, Activation::gelu_erf, Activation::gelu_tanh, Activation::tanh}) {
    CAPTURE(static_cast<int>(f));
    Floats x(be, X), y(be, n, 0.f), dy(be, DY), dx(be, n, 0.f);
    be.activation_forward(f, x.get(), y.get(), static_cast<int64_t>(n));
    std::vector<double> ref(n), dref(n);
    for (size_t i = 0; i < n; ++i) {
      ref[i] = forward_ref(f, X[i]);
      dref[i] = derivative_ref(f, X[i]) * DY[i];
    }
    check_close(y.read(), ref, 1e-6, 1e-5, "activation_forward");
    be.activation_backward(f, x.get(), y.get(), dy.get(), dx.get(), static_cast<int64_t>(n));
    check_close(dx.read(), dref, 1e-6, 1e-5, "activation_backward");
  }
}

TEST_CASE("gelu_tanh differs from gelu_erf (the right formula is used)") {
  CpuBackend be(0, 1);
  Floats x(be, {1.f}), y(be, {0.f});
  be.activation_forward(Activation::gelu_tanh, x.get(), y.get(), 1);
  const float tanh_value = y.read()[0];
  be.activation_forward(Activation::gelu_erf, x.get(), y.get(), 1);
  const float erf_value = y.read()[0];
  CHECK(tanh_value == doctest::Approx(0.841191990).epsilon(1e-6));  // PyTorch's values at 1
  CHECK(erf_value == doctest::Approx(0.841344746).epsilon(1e-6));
}

TEST_CASE("dropout: mask from counter_uniform, inverted scaling, backward recomputes it") {
  CpuBackend be(0, 1);
  const size_t n = 10000;
  const float p = 0.3f;
  const uint64_t key = 0x1234;
  const auto X = random_floats(n, 7), DY = random_floats(n, 8);
  Floats x(be, X), y(be, n, 0.f), dy(be, DY), dx(be, n, 0.f);
  be.dropout_forward(x.get(), y.get(), static_cast<int64_t>(n), p, key);
  be.dropout_backward(dy.get(), dx.get(), static_cast<int64_t>(n), p, key);
  std::vector<double> ref(n), dref(n);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool keep = counter_uniform(key, i) >= p;
    kept += keep;
    ref[i] = keep ? X[i] / (1.0 - p) : 0.0;
    dref[i] = keep ? DY[i] / (1.0 - p) : 0.0;
  }
  CHECK(kept > 6700);
  CHECK(kept < 7300);
  check_close(y.read(), ref, 0, 1e-6, "dropout_forward");
  check_close(dx.read(), dref, 0, 1e-6, "dropout_backward");

  // Another key gives another mask; p = 0 is the identity; p = 1 drops everything.
  Floats y2(be, n, 0.f);
  be.dropout_forward(x.get(), y2.get(), static_cast<int64_t>(n), p, key + 1);
  CHECK(!same_bits(y.read(), y2.read()));
  be.dropout_forward(x.get(), y2.get(), static_cast<int64_t>(n), 0.f, key);
  CHECK(same_bits(y2.read(), X));
  be.dropout_forward(x.get(), y2.get(), static_cast<int64_t>(n), 1.f, key);
  check_close(y2.read(), std::vector<double>(n, 0.0), 0, 0, "dropout p=1");
}
