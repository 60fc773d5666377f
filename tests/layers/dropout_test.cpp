// Dropout: masks are a pure function of (seed, step, micro-batch, layer key); inverted scaling;
// the identity (and nothing saved) in evaluation or with p = 0.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "engine/core/error.h"
#include "layers/dropout.h"
#include "tests/layers/gradcheck.h"

using namespace pt;
using namespace pt::test;

namespace {

std::vector<float> run(Dropout& d, const Tensor& x, const StepInfo& info, uint64_t key) {
  LayerContext ctx(backend(), info, key);
  return to_host(backend(), d.forward(x, ctx));
}

}  // namespace

TEST_CASE("dropout masks are deterministic per (seed, step, micro-batch, key)") {
  Backend& be = backend();
  Dropout d(Shape{64}, 0.5f);
  const Tensor x = to_device(be, random_uniform(1, 8 * 64), Shape{8, 64});
  const StepInfo base{/*seed=*/3, /*step=*/10, /*microbatch=*/1, /*training=*/true};
  const std::vector<float> a = run(d, x, base, 5);
  CHECK(run(d, x, base, 5) == a);

  StepInfo other_mb = base;
  other_mb.microbatch = 2;
  CHECK(run(d, x, other_mb, 5) != a);
  StepInfo other_step = base;
  other_step.step = 11;
  CHECK(run(d, x, other_step, 5) != a);
  StepInfo other_seed = base;
  other_seed.seed = 4;
  CHECK(run(d, x, other_seed, 5) != a);
  CHECK(run(d, x, base, 6) != a);  // another layer

  // Recomputation: the key depends on nothing but the step and the context.
  LayerContext c1(be, base, 5);
  CHECK(Dropout::mask_key(c1) == Dropout::mask_key(LayerContext(be, base, 5)));
  CHECK(Dropout::mask_key(c1) != Dropout::mask_key(LayerContext(be, other_mb, 5)));
}

TEST_CASE("dropout keeps about 1 - p of the elements and scales them by 1/(1 - p)") {
  Backend& be = backend();
  const float p = 0.25f;
  const int64_t n = 200000;
  Dropout d(Shape{n}, p);
  const Tensor x = to_device(be, std::vector<float>(static_cast<size_t>(n), 1.f), Shape{1, n});
  const StepInfo info{7, 1, 0, true};
  LayerContext ctx(be, info, 9);
  const Tensor y = d.forward(x, ctx);
  CHECK(ctx.saved_bytes() == 0);  // the mask is recomputed in backward
  const std::vector<float> yh = to_host(be, y);
  int64_t zeros = 0, wrong_scale = 0;
  double sum = 0;
  for (float v : yh) {
    if (v == 0.f)
      ++zeros;
    else if (std::abs(v - 1.f / (1.f - p)) > 1e-6f)
      ++wrong_scale;
    sum += v;
  }
  CHECK(wrong_scale == 0);
  // 200k Bernoulli(0.25): standard deviation of the fraction ~0.001; allow 0.01.
  CHECK(static_cast<double>(zeros) / n == doctest::Approx(p).epsilon(0.04));
  CHECK(sum / n == doctest::Approx(1.0).epsilon(0.02));

  // Backward applies the same mask and scale to dy.
  const std::vector<float> dyh = random_uniform(2, n);
  const std::vector<float> dx = to_host(be, d.backward_input(to_device(be, dyh, Shape{1, n}), ctx));
  int64_t mismatches = 0;
  for (size_t i = 0; i < dx.size(); ++i) {
    const float want = yh[i] == 0.f ? 0.f : dyh[i] / (1.f - p);
    if (std::abs(dx[i] - want) > 1e-6f * (1.f + std::abs(want))) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("dropout is the identity in evaluation and with p = 0") {
  Backend& be = backend();
  const Tensor x = to_device(be, random_uniform(3, 40), Shape{4, 10});
  const Tensor dy = to_device(be, random_uniform(4, 40), Shape{4, 10});
  SUBCASE("evaluation") {
    Dropout d(Shape{10}, 0.5f);
    const StepInfo eval{1, 1, 0, /*training=*/false};
    LayerContext ctx(be, eval, 1);
    const Tensor y = d.forward(x, ctx);
    CHECK(y.data() == x.data());
    CHECK(ctx.saved_count() == 0);
    CHECK(d.backward_input(dy, ctx).data() == dy.data());
  }
  SUBCASE("p = 0 in training") {
    Dropout d(Shape{10}, 0.f);
    const StepInfo train{1, 1, 0, true};
    LayerContext ctx(be, train, 1);
    CHECK(to_host(be, d.forward(x, ctx)) == to_host(be, x));
    CHECK(ctx.saved_bytes() == 0);
    CHECK(to_host(be, d.backward_input(dy, ctx)) == to_host(be, dy));
  }
}

TEST_CASE("dropout rejects p outside [0, 1)") {
  CHECK_THROWS_WITH_AS(Dropout(Shape{4}, 1.f), "dropout: p must be in [0, 1) but got 1",
                       ShapeError);
  CHECK_THROWS_WITH_AS(Dropout(Shape{4}, -0.5f), "dropout: p must be in [0, 1) but got -0.5",
                       ShapeError);
  CHECK_NOTHROW(Dropout(Shape{4}, 0.f));
  CHECK_NOTHROW(Dropout(Shape{4}, 0.99f));
}
