// Embedding lookup and its accumulating weight gradient.
#include <doctest/doctest.h>

#include "engine/core/error.h"
#include "tests/kernels/kernel_test_util.h"

using namespace pt;
using namespace pt::test;

TEST_CASE("embedding forward and backward_weight with repeated ids") {
  CpuBackend be(0, 1);
  const int64_t vocab = 17, dim = 300, n = 23;
  const auto T = random_floats(vocab * dim, 1), DY = random_floats(n * dim, 2);
  auto I = random_ints(n, 3, static_cast<int32_t>(vocab));
  I[5] = I[9] = I[14] = 4;  // repeats accumulate
  I[0] = 0;
  I[1] = static_cast<int32_t>(vocab - 1);
  Floats table(be, T), y(be, n * dim, 0.f), dy(be, DY);
  Ints ids(be, I);
  be.embedding_forward(ids.get(), table.get(), y.get(), n, dim, vocab);
  std::vector<double> want(static_cast<size_t>(n * dim));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < dim; ++c) want[i * dim + c] = T[I[i] * dim + c];
  check_close(y.read(), want, 0, 0, "embedding_forward");

  const auto G0 = random_floats(vocab * dim, 4);
  Floats dtable(be, G0);
  std::vector<double> grad(static_cast<size_t>(vocab * dim), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < dim; ++c) grad[I[i] * dim + c] += DY[i * dim + c];
  for (int call = 1; call <= 2; ++call) {
    be.embedding_backward_weight(ids.get(), dy.get(), dtable.get(), n, dim);
    std::vector<double> w(grad.size());
    for (size_t k = 0; k < w.size(); ++k) w[k] = G0[k] + call * grad[k];
    check_close(dtable.read(), w, 1e-6, 1e-6, "embedding_backward_weight");
  }
}

TEST_CASE("embedding: an id outside the vocabulary is a usage error naming it") {
  CpuBackend be(0, 1);
  Floats table(be, 8, 1.f), y(be, 6, 0.f);
  for (int32_t bad : {4, -2}) {
    Ints ids(be, {1, 2, bad});
    std::string message;
    try {
      be.embedding_forward(ids.get(), table.get(), y.get(), 3, 2, 4);
    } catch (const UsageError& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(message.find("id " + std::to_string(bad)) != std::string::npos);
    CHECK(message.find("position 2") != std::string::npos);
    CHECK(message.find("[0, 4)") != std::string::npos);
  }
}
