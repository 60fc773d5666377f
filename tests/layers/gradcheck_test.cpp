// Finite-difference checks of every layer's backward_input (dx) and backward_weight (dW).
// Tolerances: kExact / kSmooth in gradcheck.h (|a - b| <= atol + rtol |numeric|, eps 1e-2).
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "layers/layers.h"
#include "tests/layers/gradcheck.h"

using namespace pt;
using namespace pt::test;

namespace {

void check_ok(const GradReport& r) {
  INFO(r.text);
  CHECK(r.ok());
  if (std::getenv("PIPETRAIN_GRADCHECK_VERBOSE") != nullptr) MESSAGE(r.text);  // worst ratios
}

GradcheckOptions exact(uint64_t seed = 1) {
  GradcheckOptions o;
  o.tol = kExact;
  o.seed = seed;
  return o;
}

GradcheckOptions smooth(uint64_t seed = 1) {
  GradcheckOptions o;
  o.tol = kSmooth;
  o.seed = seed;
  return o;
}

Tensor uniform_input(const Shape& s, uint64_t seed) {
  return to_device(backend(), random_uniform(seed, s.numel()), s);
}

}  // namespace

TEST_CASE("gradcheck: linear on (B, in)") {
  Linear l(Shape{6}, 4);
  check_ok(gradcheck_layer(l, uniform_input(Shape{5, 6}, 11), exact()));
}

TEST_CASE("gradcheck: linear without bias") {
  Linear l(Shape{6}, 3, /*bias=*/false);
  check_ok(gradcheck_layer(l, uniform_input(Shape{4, 6}, 12), exact()));
}

TEST_CASE("gradcheck: linear on a sequence (B, T, C)") {
  Linear l(Shape{3, 5}, 4);
  CHECK(l.output_shape() == Shape{3, 4});
  check_ok(gradcheck_layer(l, uniform_input(Shape{2, 3, 5}, 13), exact()));
}

TEST_CASE("gradcheck: activations") {
  SUBCASE("relu (inputs kept 0.1 away from the kink)") {
    ActivationLayer a(Shape{3, 7}, Activation::relu);
    const Shape s{4, 3, 7};
    check_ok(
        gradcheck_layer(a, to_device(backend(), random_away_from_zero(21, s.numel()), s), exact()));
  }
  SUBCASE("gelu (erf)") {
    ActivationLayer a(Shape{10}, Activation::gelu_erf);
    check_ok(gradcheck_layer(
        a, to_device(backend(), random_uniform(22, 40, -3.f, 3.f), Shape{4, 10}), smooth()));
  }
  SUBCASE("gelu (tanh)") {
    ActivationLayer a(Shape{10}, Activation::gelu_tanh);
    check_ok(gradcheck_layer(
        a, to_device(backend(), random_uniform(23, 40, -3.f, 3.f), Shape{4, 10}), smooth()));
  }
  SUBCASE("tanh") {
    ActivationLayer a(Shape{10}, Activation::tanh);
    check_ok(gradcheck_layer(
        a, to_device(backend(), random_uniform(24, 40, -2.f, 2.f), Shape{4, 10}), smooth()));
  }
}

TEST_CASE("gradcheck: dropout in training (fixed mask)") {
  Dropout d(Shape{5, 8}, 0.3f);
  check_ok(gradcheck_layer(d, uniform_input(Shape{3, 5, 8}, 31), exact()));
}

TEST_CASE("gradcheck: layernorm") {
  SUBCASE("(B, C)") {
    LayerNorm ln(Shape{8});
    check_ok(gradcheck_layer(ln, uniform_input(Shape{4, 8}, 41), smooth()));
  }
  SUBCASE("(B, T, C) with gamma and beta away from their init") {
    LayerNorm ln(Shape{3, 6});
    GradcheckOptions o = smooth(2);
    o.param_scale = 1.5f;
    check_ok(gradcheck_layer(ln, uniform_input(Shape{2, 3, 6}, 42), o));
  }
}

TEST_CASE("gradcheck: embedding weight (repeated ids accumulate)") {
  Embedding e(Shape{6}, /*vocab=*/5, /*dim=*/3);
  const Tensor ids = to_device_i32(backend(), random_ids(51, 18, 5), Shape{3, 6});
  GradcheckOptions o = exact();
  o.check_input = false;
  check_ok(gradcheck_layer(e, ids, o));
  // No gradient flows into ids.
  LayerContext ctx(backend(), check_step_info(), 1);
  const Tensor y = e.forward(ids, ctx);
  CHECK(y.shape() == Shape{3, 6, 3});
  CHECK_FALSE(e.backward_input(backend().zeros(y.shape()), ctx).defined());
}

TEST_CASE("gradcheck: flatten and reshape share memory") {
  SUBCASE("flatten") {
    Flatten f(Shape{2, 3, 4});
    const Tensor x = uniform_input(Shape{3, 2, 3, 4}, 61);
    check_ok(gradcheck_layer(f, x, exact()));
    LayerContext ctx(backend(), check_step_info(), 1);
    const Tensor y = f.forward(x, ctx);
    CHECK(y.shape() == Shape{3, 24});
    CHECK(y.data() == x.data());
    const Tensor dx = f.backward_input(y, ctx);
    CHECK(dx.shape() == x.shape());
    CHECK(dx.data() == x.data());
  }
  SUBCASE("reshape") {
    Reshape r(Shape{12}, Shape{3, 4});
    const Tensor x = uniform_input(Shape{2, 12}, 62);
    check_ok(gradcheck_layer(r, x, exact()));
    LayerContext ctx(backend(), check_step_info(), 1);
    CHECK(r.forward(x, ctx).data() == x.data());
  }
}

TEST_CASE("gradcheck: conv2d") {
  SUBCASE("stride 2, padding 1") {
    Conv2d c(Shape{3, 7, 7}, /*out_channels=*/4, /*kernel=*/3, /*stride=*/2, /*padding=*/1);
    CHECK(c.output_shape() == Shape{4, 4, 4});
    check_ok(gradcheck_layer(c, uniform_input(Shape{2, 3, 7, 7}, 71), exact()));
  }
  SUBCASE("stride 1, no padding, no bias, non-square input") {
    Conv2d c(Shape{2, 6, 5}, 3, 2, 1, 0, /*bias=*/false);
    CHECK(c.output_shape() == Shape{3, 5, 4});
    check_ok(gradcheck_layer(c, uniform_input(Shape{2, 2, 6, 5}, 72), exact()));
  }
}

TEST_CASE("gradcheck: pools") {
  SUBCASE("maxpool 2x2 (distinct inputs: no ties)") {
    MaxPool2d p(Shape{2, 6, 6}, 2);
    CHECK(p.output_shape() == Shape{2, 3, 3});
    const Shape s{2, 2, 6, 6};
    check_ok(gradcheck_layer(p, to_device(backend(), random_distinct(81, s.numel()), s), exact()));
  }
  SUBCASE("maxpool 3x3 stride 2 padding 1 (overlapping windows)") {
    MaxPool2d p(Shape{2, 7, 7}, 3, 2, 1);
    CHECK(p.output_shape() == Shape{2, 4, 4});
    const Shape s{2, 2, 7, 7};
    check_ok(gradcheck_layer(p, to_device(backend(), random_distinct(82, s.numel()), s), exact()));
  }
  SUBCASE("avgpool 2x2") {
    AvgPool2d p(Shape{3, 4, 6}, 2);
    CHECK(p.output_shape() == Shape{3, 2, 3});
    check_ok(gradcheck_layer(p, uniform_input(Shape{2, 3, 4, 6}, 83), exact()));
  }
  SUBCASE("avgpool 3x3 stride 2 padding 1 (padding counts)") {
    AvgPool2d p(Shape{2, 7, 7}, 3, 2, 1);
    CHECK(p.output_shape() == Shape{2, 4, 4});
    check_ok(gradcheck_layer(p, uniform_input(Shape{2, 2, 7, 7}, 84), exact()));
  }
}

namespace {

std::unique_ptr<Residual> mlp_block(const Shape& in, int64_t hidden) {
  std::vector<std::unique_ptr<Layer>> body;
  body.push_back(std::make_unique<Linear>(in, hidden));
  Shape h = in;
  h[h.rank() - 1] = hidden;
  body.push_back(std::make_unique<ActivationLayer>(h, Activation::gelu_erf));
  body.push_back(std::make_unique<Linear>(h, in.back()));
  return std::make_unique<Residual>(in, std::move(body));
}

}  // namespace

TEST_CASE("gradcheck: residual (linear, gelu, linear)") {
  SUBCASE("(B, C)") {
    auto r = mlp_block(Shape{5}, 7);
    check_ok(gradcheck_layer(*r, uniform_input(Shape{3, 5}, 91), smooth()));
  }
  SUBCASE("(B, T, C)") {
    auto r = mlp_block(Shape{3, 4}, 6);
    check_ok(gradcheck_layer(*r, uniform_input(Shape{2, 3, 4}, 92), smooth()));
  }
  SUBCASE("a layernorm inside, then a nested residual") {
    std::vector<std::unique_ptr<Layer>> body;
    body.push_back(std::make_unique<LayerNorm>(Shape{6}));
    body.push_back(mlp_block(Shape{6}, 8));
    Residual r(Shape{6}, std::move(body));
    check_ok(gradcheck_layer(r, uniform_input(Shape{3, 6}, 93), smooth()));
  }
}

// ---- the checker itself must be able to fail ----------------------------------------------------
namespace {

// y = a x with one parameter a (1); bugs switched on by flags.
class ScaleLayer final : public Layer {
 public:
  ScaleLayer(Shape in, bool wrong_dx, bool assign_dw)
      : Layer("scale", in), wrong_dx_(wrong_dx), assign_dw_(assign_dw) {
    output_shape_ = in;
  }
  std::string_view kind() const override { return "scale"; }
  std::vector<ParamSpec> param_specs() const override {
    return {{"a", Shape{1}, ParamInit::ones()}};
  }
  LayerCost cost() const override { return {}; }
  Tensor forward(const Tensor& x, LayerContext& ctx) override {
    ctx.save(x);
    Tensor y = ctx.alloc(x.shape());
    ctx.backend().fill(y.f32(), 0.f, y.numel());
    ctx.backend().axpy(a(ctx), x.f32(), y.f32(), y.numel());
    return y;
  }
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override {
    Tensor dx = ctx.alloc(dy.shape());
    ctx.backend().fill(dx.f32(), 0.f, dx.numel());
    ctx.backend().axpy(a(ctx) * (wrong_dx_ ? 1.1f : 1.f), dy.f32(), dx.f32(), dx.numel());
    return dx;
  }
  void backward_weight(const Tensor& dy, LayerContext& ctx) override {
    // da (+)= sum(dy * x), on the host: a test double, not a real layer.
    const std::vector<float> d = to_host(ctx.backend(), dy),
                             x = to_host(ctx.backend(), ctx.saved(0));
    float s = 0;
    for (size_t i = 0; i < d.size(); ++i) s += d[i] * x[i];
    std::vector<float> g = to_host(ctx.backend(), grads_[0]);
    g[0] = assign_dw_ ? s : g[0] + s;
    ctx.backend().copy_from_host(grads_[0].data(), g.data(), sizeof(float));
  }

 private:
  float a(LayerContext& ctx) const { return to_host(ctx.backend(), params_[0])[0]; }
  bool wrong_dx_, assign_dw_;
};

}  // namespace

TEST_CASE("gradcheck catches a wrong dx and an assigned (not accumulated) dW") {
  const Tensor x = uniform_input(Shape{3, 4}, 99);
  ScaleLayer good(Shape{4}, false, false);
  CHECK(gradcheck_layer(good, x, exact()).ok());
  ScaleLayer bad_dx(Shape{4}, true, false);
  const GradReport r1 = gradcheck_layer(bad_dx, x, exact());
  CHECK_FALSE(r1.ok());
  CHECK(r1.text.find("dx[") != std::string::npos);
  ScaleLayer bad_dw(Shape{4}, false, true);
  const GradReport r2 = gradcheck_layer(bad_dw, x, exact());
  CHECK_FALSE(r2.ok());
  CHECK(r2.text.find("da[") != std::string::npos);
}
