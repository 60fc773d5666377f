// compare_tensors: the largest difference between two runs' tensors, where NaN is never "equal".
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/report/compare.h"

using namespace pt;

namespace {
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

TEST_CASE("compare_tensors: equal tensors are identical, differences are the largest |a - b|") {
  const std::vector<float> a{1.f, -2.f, 0.f, kInf};
  CHECK(compare_tensors(a, a).identical());
  CHECK(compare_tensors(a, a).max_abs == 0.0);
  CHECK(compare_tensors(std::vector<float>{0.f}, std::vector<float>{-0.f}).identical());

  const std::vector<float> b{1.f, -2.5f, 0.25f, kInf};
  const TensorDiff d = compare_tensors(a, b);
  CHECK_FALSE(d.identical());
  CHECK(d.max_abs == 0.5);
  CHECK(d.nan_count == 0);
  CHECK(d.elements == 4);
  CHECK(compare_tensors(std::vector<float>{kInf}, std::vector<float>{1.f}).max_abs == HUGE_VAL);
}

TEST_CASE("compare_tensors: a NaN on either side, or on both, is a difference of +inf") {
  // std::max(worst, |a - b|) would report 0 for each of these.
  const std::vector<float> ok{1.f, 2.f, 3.f};
  const std::vector<float> nan_in_a{1.f, kNaN, 3.f};
  const std::vector<float> nan_in_b{kNaN, 2.f, 3.f};
  for (const auto& [x, y] : {std::pair{&nan_in_a, &ok}, std::pair{&ok, &nan_in_b},
                             std::pair{&nan_in_a, &nan_in_a}, std::pair{&nan_in_a, &nan_in_b}}) {
    const TensorDiff d = compare_tensors(*x, *y);
    CHECK_FALSE(d.identical());
    CHECK(d.max_abs == HUGE_VAL);
    CHECK(d.nan_count >= 1);
    CHECK_FALSE(d.max_abs <= 1e-6);  // no tolerance accepts it
  }
  CHECK(compare_tensors(nan_in_a, nan_in_b).nan_count == 2);
}

TEST_CASE("compare_tensors: verdicts combine over tensors, and sizes must match") {
  TensorDiff all;
  all += compare_tensors(std::vector<float>{1.f}, std::vector<float>{1.25f});
  CHECK(all.max_abs == 0.25);
  all += compare_tensors(std::vector<float>{kNaN}, std::vector<float>{0.f});
  all += compare_tensors(std::vector<float>{1.f}, std::vector<float>{2.f});
  CHECK(all.max_abs == HUGE_VAL);  // a later, finite difference does not hide the NaN
  CHECK(all.nan_count == 1);
  CHECK(all.elements == 3);
  CHECK_THROWS_AS(compare_tensors(std::vector<float>{1.f}, std::vector<float>{1.f, 2.f}),
                  std::invalid_argument);
}
