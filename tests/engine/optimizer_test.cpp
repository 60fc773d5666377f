// Optimizers against values computed by hand from PyTorch's update rules, LR schedules, clipping.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "engine/core/error.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "kernels/cpu/cpu_backend.h"

using namespace pt;

namespace {

// One parameter tensor of 1 element: p = 1, g = 0.5 for every step.
struct OneParam {
  std::unique_ptr<Backend> backend = make_cpu_backend(0, 1);
  SizeTable table;
  Arena params, grads;
  OneParam() {
    table.add("p", Shape{1});
    params = Arena(*backend, table);
    grads = Arena(*backend, table);
    params.view(0).f32()[0] = 1.f;
    grads.view(0).f32()[0] = 0.5f;
  }
  float run(const OptimizerConfig& c, int steps, float lr) {
    Optimizer opt(c, *backend, table);
    for (int i = 0; i < steps; ++i) opt.step(params.flat(), grads.flat(), lr);
    return params.view(0).f32()[0];
  }
};

OptimizerConfig sgd(float momentum, bool nesterov = false, float wd = 0.f) {
  OptimizerConfig c;
  c.kind = "sgd";
  c.momentum = momentum;
  c.nesterov = nesterov;
  c.weight_decay = wd;
  return c;
}

}  // namespace

TEST_CASE("SGD without momentum") {
  CHECK(OneParam().run(sgd(0.f), 2, 0.1f) == doctest::Approx(0.9f));
}

TEST_CASE("SGD with momentum: buffer starts at g, then buf = 0.9 buf + g") {
  // step 1: buf = 0.5, p = 0.95; step 2: buf = 0.95, p = 0.855.
  CHECK(OneParam().run(sgd(0.9f), 1, 0.1f) == doctest::Approx(0.95f));
  CHECK(OneParam().run(sgd(0.9f), 2, 0.1f) == doctest::Approx(0.855f));
}

TEST_CASE("SGD Nesterov") {
  // step 1: buf = 0.5, g' = 0.5 + 0.9 * 0.5 = 0.95, p = 0.905.
  // step 2: buf = 0.9 * 0.5 + 0.5 = 0.95, g' = 0.5 + 0.855 = 1.355, p = 0.905 - 0.1355 = 0.7695.
  CHECK(OneParam().run(sgd(0.9f, true), 1, 0.1f) == doctest::Approx(0.905f));
  CHECK(OneParam().run(sgd(0.9f, true), 2, 0.1f) == doctest::Approx(0.7695f));
}

TEST_CASE("SGD weight decay adds wd * p to the gradient") {
  // g = 0.5 + 0.1 * 1 = 0.6, p = 1 - 0.06 = 0.94.
  CHECK(OneParam().run(sgd(0.f, false, 0.1f), 1, 0.1f) == doctest::Approx(0.94f));
}

TEST_CASE("AdamW: decoupled decay and bias-corrected moments") {
  OptimizerConfig c;
  c.kind = "adamw";
  c.weight_decay = 0.01f;
  // step 1: p = 0.999; m = 0.05, v = 0.00025; mhat = 0.5, vhat = 0.25; p -= 0.1 * 0.5 / 0.5.
  CHECK(OneParam().run(c, 1, 0.1f) == doctest::Approx(0.899f).epsilon(1e-6));
  // step 2: p = 0.899 * 0.999 = 0.898101; m = 0.095, v = 0.00049975; mhat = 0.095 / 0.19 = 0.5,
  // vhat = 0.00049975 / 0.001999 = 0.25 -> p -= 0.1.
  CHECK(OneParam().run(c, 2, 0.1f) == doctest::Approx(0.798101f).epsilon(1e-6));
}

TEST_CASE("optimizer settings are validated with clear messages") {
  CHECK_THROWS_WITH_AS(sgd(1.5f).validate(), doctest::Contains("momentum 1.5"), UsageError);
  CHECK_THROWS_WITH_AS(sgd(0.f, true).validate(), doctest::Contains("Nesterov"), UsageError);
  OptimizerConfig c;
  c.kind = "adam9";
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("unknown optimizer 'adam9'"), UsageError);
  c = OptimizerConfig{};
  c.lr = 0.f;
  CHECK_THROWS_AS(c.validate(), UsageError);
}

TEST_CASE("optimizer settings: every number in its stated range, finite") {
  const auto refused = [](auto set, const char* text) {
    OptimizerConfig c;
    set(c);
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains(text), UsageError);
  };
  const float inf = std::numeric_limits<float>::infinity();
  refused([&](OptimizerConfig& c) { c.lr = inf; },
          "--lr inf must be a finite number > 0 and <= 1000");
  refused([](OptimizerConfig& c) { c.lr = 1e30f; }, "--lr 1e+30 must be a finite number > 0");
  refused([](OptimizerConfig& c) { c.lr = -0.1f; }, "--lr -0.1 must be");
  refused([](OptimizerConfig& c) { c.lr = std::nanf(""); }, "--lr nan must be");
  refused([](OptimizerConfig& c) { c.momentum = -0.5f; },
          "--momentum -0.5 must be a finite number >= 0 and < 1");
  refused([](OptimizerConfig& c) { c.momentum = std::nanf(""); }, "--momentum nan");
  refused([](OptimizerConfig& c) { c.weight_decay = -1.f; },
          "--weight-decay -1 must be a finite number >= 0");
  refused([&](OptimizerConfig& c) { c.weight_decay = inf; }, "--weight-decay inf");
  refused([](OptimizerConfig& c) { c.dampening = 2.f; }, "dampening 2 must be");
  refused(
      [](OptimizerConfig& c) {
        c.kind = "adamw";
        c.eps = 0.f;
      },
      "AdamW eps 0 must be");
  OptimizerConfig ok;
  ok.lr = 1000.f;  // the bound itself is allowed
  ok.momentum = 0.f;
  CHECK_NOTHROW(ok.validate());
}

TEST_CASE("LR schedules: warm-up, constant, cosine") {
  LrSchedule s{LrSchedule::Kind::cosine, 1.0f, 10, 110, 0.1f};
  CHECK(s.at(0) == doctest::Approx(0.1f));
  CHECK(s.at(9) == doctest::Approx(1.0f));
  CHECK(s.at(10) == doctest::Approx(1.0f));
  CHECK(s.at(60) == doctest::Approx(0.55f));  // half way: min + (base - min) / 2
  CHECK(s.at(110) == doctest::Approx(0.1f));
  LrSchedule c{LrSchedule::Kind::constant, 0.3f, 0, 0, 0.f};
  CHECK(c.at(0) == 0.3f);
  CHECK(c.at(1000) == 0.3f);
  CHECK_THROWS_AS(LrSchedule::parse_kind("linear-ish"), UsageError);
}

TEST_CASE("clipping factor follows clip_grad_norm_") {
  CHECK(clip_factor(0.5, 1.f) == 1.f);
  CHECK(clip_factor(4.0, 0.f) == 1.f);  // disabled
  CHECK(clip_factor(4.0, 1.f) == doctest::Approx(0.25f));
}
