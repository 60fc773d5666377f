// The vectorisable float maths behind the activations and softmax (kernels/cpu/cpu_math.h),
// swept against libm in double: relative error, tails, and inf/NaN handling.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_math.h"

using namespace pt::cpu;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

double phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// Largest relative error of f against ref over n points evenly spread in [lo, hi].
template <class F, class R>
double max_rel_error(F f, R ref, double lo, double hi, int n = 200001) {
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    const float x = static_cast<float>(lo + (hi - lo) * i / (n - 1));
    const double want = ref(static_cast<double>(x));
    if (want == 0) continue;
    worst = std::max(worst, std::abs(static_cast<double>(f(x)) - want) / std::abs(want));
  }
  return worst;
}

}  // namespace

TEST_CASE("exp_f32: a few ulp over the whole range, inf above, 0 below, NaN through") {
  CHECK(max_rel_error(
            exp_f32, [](double x) { return std::exp(x); }, -87.3, 88.3) < 4e-7);
  CHECK(max_rel_error(
            exp_f32, [](double x) { return std::exp(x); }, -1, 1) < 2.5e-7);
  CHECK(exp_f32(0.f) == 1.f);
  CHECK(exp_f32(89.f) == kInf);
  CHECK(exp_f32(kInf) == kInf);
  CHECK(exp_f32(-88.f) == 0.f);
  CHECK(exp_f32(-kInf) == 0.f);
  CHECK(std::isnan(exp_f32(kNaN)));
}

TEST_CASE("tanh_f32: relative accuracy near 0 and saturation far out") {
  auto ref = [](double x) { return std::tanh(x); };
  CHECK(max_rel_error(tanh_f32, ref, -1, 1) < 4e-7);
  CHECK(max_rel_error(tanh_f32, ref, -1e-3, 1e-3) < 2e-7);
  CHECK(max_rel_error(tanh_f32, ref, -20, 20) < 4e-7);
  CHECK(tanh_f32(0.f) == 0.f);
  CHECK(tanh_f32(50.f) == 1.f);
  CHECK(tanh_f32(-kInf) == -1.f);
  CHECK(std::isnan(tanh_f32(kNaN)));
}

// The error grows in the lower tail only because e^{-x^2/2} is evaluated at a rounded argument;
// 1 + erf(x / sqrt 2) in float (PyTorch's formula) loses all relative accuracy there.
TEST_CASE("normal_cdf_f32: relative accuracy including the lower tail") {
  CHECK(max_rel_error(normal_cdf_f32, phi, -1, 1) < 5e-7);
  CHECK(max_rel_error(normal_cdf_f32, phi, -5, 8) < 3e-6);
  CHECK(max_rel_error(normal_cdf_f32, phi, -12, 8) < 3e-5);
  CHECK(normal_cdf_f32(0.f) == doctest::Approx(0.5).epsilon(1e-7));
  CHECK(normal_cdf_f32(kInf) == 1.f);
  CHECK(normal_cdf_f32(-kInf) == 0.f);
  CHECK(std::isnan(normal_cdf_f32(kNaN)));
}
