// Softmax cross-entropy, MSE and the accuracy count against double-precision references.
#include <doctest/doctest.h>

#include <cmath>

#include "engine/core/error.h"
#include "tests/kernels/kernel_test_util.h"

using namespace pt;
using namespace pt::test;

TEST_CASE("softmax_xent forward and backward") {
  CpuBackend be(0, 1);
  const int64_t rows = 19, classes = 11;
  auto L = random_floats(rows * classes, 1, -5.f, 5.f);
  L[3] = 80.f;  // large logits must not overflow (the row max is subtracted)
  L[4] = 79.f;
  const auto Y = random_ints(rows, 2, static_cast<int32_t>(classes));
  Floats logits(be, L), probs(be, rows * classes, 0.f), dlogits(be, rows * classes, 0.f);
  Ints labels(be, Y);
  const double loss =
      be.softmax_xent_forward(logits.get(), labels.get(), probs.get(), rows, classes);

  std::vector<double> p(L.size()), d(L.size());
  double want_loss = 0;
  const double scale = 1.0 / rows;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -1e300, sum = 0;
    for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, double(L[r * classes + c]));
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(L[r * classes + c] - mx);
    for (int64_t c = 0; c < classes; ++c) {
      p[r * classes + c] = std::exp(L[r * classes + c] - mx) / sum;
      d[r * classes + c] = scale * (p[r * classes + c] - (c == Y[r] ? 1 : 0));
    }
    want_loss -= std::log(p[r * classes + Y[r]]);
  }
  CHECK(loss == doctest::Approx(want_loss).epsilon(1e-6));
  check_close(probs.read(), p, 1e-7, 1e-5, "softmax probs");

  be.softmax_xent_backward(probs.get(), labels.get(), dlogits.get(), rows, classes,
                           static_cast<float>(scale));
  check_close(dlogits.read(), d, 1e-7, 1e-5, "softmax_xent_backward");

  // In place (the loss layer writes the gradient over the probabilities): the same bits.
  be.softmax_xent_backward(probs.get(), labels.get(), probs.get(), rows, classes,
                           static_cast<float>(scale));
  CHECK(probs.read() == dlogits.read());
}

TEST_CASE("softmax_xent: a label outside [0, classes) is a usage error naming row and label") {
  CpuBackend be(0, 1);
  Floats logits(be, 12, 0.f), probs(be, 12, 0.f);
  for (int32_t bad : {4, -1}) {
    Ints labels(be, {0, 3, bad});
    std::string message;
    try {
      be.softmax_xent_forward(logits.get(), labels.get(), probs.get(), 3, 4);
    } catch (const UsageError& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(message.find("row 2") != std::string::npos);
    CHECK(message.find("label " + std::to_string(bad)) != std::string::npos);
    CHECK(message.find("[0, 4)") != std::string::npos);
    CHECK_THROWS_AS(be.softmax_xent_backward(probs.get(), labels.get(), logits.get(), 3, 4, 1.f),
                    UsageError);
  }
}

TEST_CASE("mse forward and backward") {
  CpuBackend be(0, 1);
  const size_t n = 40001;  // spans several reduction blocks
  const auto P = random_floats(n, 3), T = random_floats(n, 4);
  Floats pred(be, P), target(be, T), dpred(be, n, 0.f);
  double want = 0;
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) {
    const double e = double(P[i]) - T[i];
    want += e * e;
    d[i] = 0.25 * 2 * e;
  }
  CHECK(be.mse_forward(pred.get(), target.get(), static_cast<int64_t>(n)) ==
        doctest::Approx(want).epsilon(1e-12));
  be.mse_backward(pred.get(), target.get(), dpred.get(), static_cast<int64_t>(n), 0.25f);
  check_close(dpred.read(), d, 1e-7, 1e-6, "mse_backward");
}

TEST_CASE("count_correct: first maximum wins") {
  CpuBackend be(0, 1);
  // rows: argmax 2; tie between 0 and 3 -> 0; all equal -> 0; argmax 1.
  Floats logits(be, {0, 1, 5, 2, /**/ 7, 1, 2, 7, /**/ 3, 3, 3, 3, /**/ -1, -0.5f, -2, -3});
  Ints labels(be, {2, 3, 0, 1});
  CHECK(be.count_correct(logits.get(), labels.get(), 4, 4) == 3);
  Ints labels2(be, {2, 0, 1, 1});
  CHECK(be.count_correct(logits.get(), labels2.get(), 4, 4) == 3);
}
