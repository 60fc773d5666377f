// Losses: gradient against finite differences of the loss (kSmooth, gradcheck.h), the value
// against a double-precision host reference (relative 1e-6), micro-batch shares adding up to
// the full-batch mean, accuracy counts.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "engine/core/error.h"
#include "layers/losses.h"
#include "tests/layers/gradcheck.h"

using namespace pt;
using namespace pt::test;

namespace {

// sum over rows of -log softmax(z)[label], in double.
double xent_reference(const std::vector<float>& logits, const std::vector<int32_t>& labels,
                      int64_t classes) {
  double total = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    const float* z = logits.data() + r * static_cast<size_t>(classes);
    double mx = z[0];
    for (int64_t c = 1; c < classes; ++c) mx = std::max(mx, static_cast<double>(z[c]));
    double s = 0;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(z[c] - mx);
    total += -(z[labels[r]] - mx - std::log(s));
  }
  return total;
}

void check_ok(const GradReport& r) {
  INFO(r.text);
  CHECK(r.ok());
}

}  // namespace

TEST_CASE("softmax cross-entropy on (B, classes)") {
  Backend& be = backend();
  SoftmaxCrossEntropy loss(Shape{5});
  CHECK(loss.target_shape() == Shape{});
  CHECK(loss.target_dtype() == DType::i32);
  const std::vector<float> zh = random_uniform(1, 20, -2.f, 2.f);
  const std::vector<int32_t> yh = random_ids(2, 4, 5);
  const Tensor z = to_device(be, zh, Shape{4, 5});
  const Tensor y = to_device_i32(be, yh, Shape{4});
  const int64_t G = 6;  // this micro-batch is 4 of a global batch of 6

  LayerContext ctx(be, check_step_info(), 3);
  const double l = loss.forward(z, y, G, ctx);
  CHECK(l == doctest::Approx(xent_reference(zh, yh, 5) / G).epsilon(1e-6));
  check_ok(gradcheck_loss(loss, z, y, G));
}

TEST_CASE("softmax cross-entropy on (B, T, classes): the mean runs over B*T tokens") {
  Backend& be = backend();
  SoftmaxCrossEntropy loss(Shape{3, 5});
  CHECK(loss.target_shape() == Shape{3});
  const std::vector<float> zh = random_uniform(3, 30, -2.f, 2.f);
  const std::vector<int32_t> yh = random_ids(4, 6, 5);
  const Tensor z = to_device(be, zh, Shape{2, 3, 5});
  const Tensor y = to_device_i32(be, yh, Shape{2, 3});
  const int64_t G = 4;

  LayerContext ctx(be, check_step_info(), 3);
  CHECK(loss.forward(z, y, G, ctx) ==
        doctest::Approx(xent_reference(zh, yh, 5) / (G * 3)).epsilon(1e-6));
  check_ok(gradcheck_loss(loss, z, y, G));
}

TEST_CASE("mse: PyTorch mean over every element of the global batch") {
  Backend& be = backend();
  MseLoss loss(Shape{2, 3});
  CHECK(loss.target_shape() == Shape{2, 3});
  CHECK(loss.target_dtype() == DType::f32);
  const std::vector<float> ph = random_uniform(5, 24), th = random_uniform(6, 24);
  const Tensor p = to_device(be, ph, Shape{4, 2, 3});
  const Tensor t = to_device(be, th, Shape{4, 2, 3});
  const int64_t G = 5;
  double ref = 0;
  for (size_t i = 0; i < ph.size(); ++i)
    ref += (ph[i] - static_cast<double>(th[i])) * (ph[i] - th[i]);

  LayerContext ctx(be, check_step_info(), 3);
  CHECK(loss.forward(p, t, G, ctx) == doctest::Approx(ref / (G * 6)).epsilon(1e-6));
  check_ok(gradcheck_loss(loss, p, t, G));
  CHECK(loss.count_correct(p, t, be) == -1);
}

TEST_CASE("loss shares of uneven micro-batches add up to the full-batch loss and gradient") {
  Backend& be = backend();
  const std::vector<int64_t> sizes{3, 2, 2};
  const int64_t B = 7;
  SUBCASE("softmax cross-entropy") {
    SoftmaxCrossEntropy loss(Shape{4});
    const Tensor z = to_device(be, random_uniform(7, B * 4, -3.f, 3.f), Shape{B, 4});
    const Tensor y = to_device_i32(be, random_ids(8, B, 4), Shape{B});
    const StepInfo info;
    LayerContext full(be, info, 1);
    const double whole = loss.forward(z, y, B, full);
    const std::vector<float> g_full = to_host(be, loss.backward(full));
    double shares = 0;
    int64_t first = 0;
    for (int64_t n : sizes) {
      LayerContext c(be, info, 1);
      shares += loss.forward(z.slice_rows(first, n), y.slice_rows(first, n), B, c);
      const std::vector<float> g = to_host(be, loss.backward(c));
      for (size_t i = 0; i < g.size(); ++i)
        CHECK(g[i] == doctest::Approx(g_full[static_cast<size_t>(first * 4) + i]).epsilon(1e-6));
      first += n;
    }
    CHECK(shares == doctest::Approx(whole).epsilon(1e-6));
  }
  SUBCASE("mse") {
    MseLoss loss(Shape{3});
    const Tensor p = to_device(be, random_uniform(9, B * 3), Shape{B, 3});
    const Tensor t = to_device(be, random_uniform(10, B * 3), Shape{B, 3});
    const StepInfo info;
    LayerContext full(be, info, 1);
    const double whole = loss.forward(p, t, B, full);
    const std::vector<float> g_full = to_host(be, loss.backward(full));
    double shares = 0;
    int64_t first = 0;
    for (int64_t n : sizes) {
      LayerContext c(be, info, 1);
      shares += loss.forward(p.slice_rows(first, n), t.slice_rows(first, n), B, c);
      const std::vector<float> g = to_host(be, loss.backward(c));
      for (size_t i = 0; i < g.size(); ++i)
        CHECK(g[i] == doctest::Approx(g_full[static_cast<size_t>(first * 3) + i]).epsilon(1e-6));
      first += n;
    }
    CHECK(shares == doctest::Approx(whole).epsilon(1e-6));
  }
}

TEST_CASE("softmax cross-entropy counts correct samples and tokens") {
  Backend& be = backend();
  SoftmaxCrossEntropy loss(Shape{3});
  // arg-maxes 2, 0, 1, 1 against labels 2, 1, 1, 0: two right.
  const Tensor z =
      to_device(be, {0.f, 1.f, 5.f, 3.f, 2.f, 1.f, 0.f, 4.f, 1.f, -1.f, 0.f, -2.f}, Shape{4, 3});
  const Tensor y = to_device_i32(be, {2, 1, 1, 0}, Shape{4});
  CHECK(loss.count_correct(z, y, be) == 2);

  SoftmaxCrossEntropy seq(Shape{2, 3});
  CHECK(seq.count_correct(z.reshape(Shape{2, 2, 3}), y.reshape(Shape{2, 2}), be) == 2);
}

TEST_CASE("loss errors") {
  Backend& be = backend();
  CHECK_THROWS_WITH_AS(
      SoftmaxCrossEntropy(Shape{2, 3, 4}),
      "softmax_cross_entropy: expects predictions (classes) or (T, classes) but got (2, 3, 4)",
      ShapeError);
  CHECK_THROWS_WITH_AS(SoftmaxCrossEntropy(Shape{0}),
                       "softmax_cross_entropy: classes must be positive but got 0", ShapeError);
  CHECK_THROWS_WITH_AS(SoftmaxCrossEntropy(Shape{10}).check_input(Shape{12}),
                       "softmax_cross_entropy: expects predictions (10) but the model outputs (12)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(MseLoss(Shape{3}).check_input(Shape{1, 3}),
                       "mse: expects predictions (3) but the model outputs (1, 3)", ShapeError);
  CHECK_THROWS_WITH_AS(MseLoss(Shape{0}), "mse: prediction size must be positive but got 0",
                       ShapeError);

  SoftmaxCrossEntropy loss(Shape{3});
  const StepInfo info;
  LayerContext ctx(be, info, 1);
  const Tensor z = be.zeros(Shape{4, 3});
  CHECK_THROWS_WITH_AS(loss.forward(z, be.zeros(Shape{3}, DType::i32), 4, ctx),
                       "softmax_cross_entropy: 4 predictions but 3 targets", ShapeError);
  CHECK_THROWS_WITH_AS(loss.forward(z, be.zeros(Shape{4}), 4, ctx),
                       "softmax_cross_entropy: expects targets of type I32 but got F32",
                       ShapeError);
  CHECK_THROWS_AS(loss.forward(z, be.zeros(Shape{4}, DType::i32), 2, ctx), UsageError);
  CHECK_THROWS_AS(loss.backward(ctx), UsageError);  // nothing saved yet
}
