// Parameter declarations (names, shapes, PyTorch initialisers), kinds and names, exact costs,
// and cost().activation_bytes against what forward really saves.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "layers/layers.h"
#include "tests/layers/gradcheck.h"

using namespace pt;
using namespace pt::test;

TEST_CASE("linear: parameters, PyTorch init and exact costs") {
  const Linear l(Shape{784}, 256);
  CHECK(l.kind() == "linear");
  CHECK(l.name() == "linear");
  CHECK(l.output_shape() == Shape{256});
  CHECK(l.param_count() == 784 * 256 + 256);
  const auto specs = l.param_specs();
  REQUIRE(specs.size() == 2);
  CHECK(specs[0].name == "weight");
  CHECK(specs[0].shape == Shape{256, 784});
  CHECK(specs[0].init.kind == ParamInit::Kind::uniform);
  CHECK(specs[0].init.a == doctest::Approx(1.0 / 28.0));  // 1/sqrt(784)
  CHECK(specs[1].name == "bias");
  CHECK(specs[1].shape == Shape{256});
  CHECK(specs[1].init.kind == ParamInit::Kind::uniform);
  CHECK(specs[1].init.a == doctest::Approx(1.0 / 28.0));
  const LayerCost c = l.cost();
  CHECK(c.forward_flops == 2.0 * 784 * 256);
  CHECK(c.backward_input_flops == 2.0 * 784 * 256);
  CHECK(c.backward_weight_flops == 2.0 * 784 * 256);
  CHECK(c.activation_bytes == 784 * 4);

  const Linear nb(Shape{784}, 256, false);
  CHECK(nb.param_count() == 784 * 256);
  CHECK(nb.param_specs().size() == 1);

  const Linear seq(Shape{16, 32}, 8);  // (T, C): per sample 16 rows
  CHECK(seq.output_shape() == Shape{16, 8});
  CHECK(seq.param_count() == 32 * 8 + 8);
  CHECK(seq.cost().forward_flops == 2.0 * 16 * 32 * 8);
}

TEST_CASE("conv2d: parameters, PyTorch init and exact costs") {
  const Conv2d c(Shape{3, 32, 32}, 16, 3, 1, 1);
  CHECK(c.kind() == "conv2d");
  CHECK(c.output_shape() == Shape{16, 32, 32});
  CHECK(c.param_count() == 16 * 3 * 3 * 3 + 16);
  const auto specs = c.param_specs();
  REQUIRE(specs.size() == 2);
  CHECK(specs[0].name == "weight");
  CHECK(specs[0].shape == Shape{16, 3, 3, 3});
  CHECK(specs[0].init.a == doctest::Approx(1.0 / std::sqrt(27.0)));
  CHECK(specs[1].shape == Shape{16});
  CHECK(specs[1].init.a == doctest::Approx(1.0 / std::sqrt(27.0)));
  const LayerCost k = c.cost();
  CHECK(k.forward_flops == 2.0 * 16 * 32 * 32 * 3 * 3 * 3);  // 884736
  CHECK(k.backward_input_flops == 884736.0);
  CHECK(k.backward_weight_flops == 884736.0);
  CHECK(k.activation_bytes == 3 * 32 * 32 * 4);

  const Conv2d s2(Shape{3, 7, 7}, 4, 3, 2, 1, false);
  CHECK(s2.output_shape() == Shape{4, 4, 4});
  CHECK(s2.param_count() == 4 * 3 * 9);
  CHECK(s2.cost().forward_flops == 2.0 * 4 * 4 * 4 * 3 * 9);
  const Conv2dShape op = s2.op_shape(5);
  CHECK(op.N == 5);
  CHECK(op.P == 4);
  CHECK(op.Q == 4);
  CHECK(op.pad_h == 1);
  CHECK(op.stride_w == 2);
}

TEST_CASE("layernorm and embedding parameters") {
  const LayerNorm ln(Shape{10, 64});
  const auto s = ln.param_specs();
  REQUIRE(s.size() == 2);
  CHECK(s[0].name == "weight");
  CHECK(s[0].shape == Shape{64});
  CHECK(s[0].init.kind == ParamInit::Kind::ones);
  CHECK(s[1].name == "bias");
  CHECK(s[1].init.kind == ParamInit::Kind::zeros);

  const Embedding e(Shape{32}, 256, 48);
  CHECK(e.input_dtype() == DType::i32);
  CHECK(e.output_shape() == Shape{32, 48});
  const auto es = e.param_specs();
  REQUIRE(es.size() == 1);
  CHECK(es[0].name == "weight");
  CHECK(es[0].shape == Shape{256, 48});
  CHECK(es[0].init.kind == ParamInit::Kind::normal);
  CHECK(es[0].init.a == 1.f);
}

TEST_CASE("kinds and default names") {
  CHECK(ActivationLayer(Shape{3}, Activation::relu).kind() == "relu");
  CHECK(ActivationLayer(Shape{3}, Activation::gelu_erf).kind() == "gelu");
  CHECK(ActivationLayer(Shape{3}, Activation::gelu_tanh).kind() == "gelu_tanh");
  CHECK(ActivationLayer(Shape{3}, Activation::tanh).name() == "tanh");
  CHECK(Dropout(Shape{3}, 0.1f).kind() == "dropout");
  CHECK(LayerNorm(Shape{3}).kind() == "layernorm");
  CHECK(Embedding(Shape{3}, 4, 5).kind() == "embedding");
  CHECK(Flatten(Shape{3, 2}).kind() == "flatten");
  CHECK(Flatten(Shape{3, 2}).name() == "flatten");
  CHECK(Reshape(Shape{6}, Shape{3, 2}).kind() == "reshape");
  CHECK(MaxPool2d(Shape{1, 4, 4}, 2).kind() == "maxpool2d");
  CHECK(AvgPool2d(Shape{1, 4, 4}, 2).name() == "avgpool2d");
  CHECK(SoftmaxCrossEntropy(Shape{3}).kind() == "softmax_cross_entropy");
  CHECK(MseLoss(Shape{3}).kind() == "mse");
}

TEST_CASE("residual: prefixed parameter names, binding split over the body, summed costs") {
  std::vector<std::unique_ptr<Layer>> body;
  body.push_back(std::make_unique<Linear>(Shape{8}, 16));
  body.push_back(std::make_unique<ActivationLayer>(Shape{16}, Activation::gelu_erf));
  body.push_back(std::make_unique<Linear>(Shape{16}, 8));
  Residual r(Shape{8}, std::move(body));
  CHECK(r.kind() == "residual");
  CHECK(r.output_shape() == Shape{8});
  CHECK(r.body().size() == 3);
  CHECK(r.body()[1]->kind() == "gelu");
  const auto specs = r.param_specs();
  REQUIRE(specs.size() == 4);
  CHECK(specs[0].name == "0.weight");
  CHECK(specs[1].name == "0.bias");
  CHECK(specs[2].name == "2.weight");
  CHECK(specs[2].shape == Shape{8, 16});
  CHECK(specs[3].name == "2.bias");
  CHECK(r.param_count() == (8 * 16 + 16) + (16 * 8 + 8));
  const LayerCost c = r.cost();
  CHECK(c.forward_flops == r.body()[0]->cost().forward_flops + r.body()[1]->cost().forward_flops +
                               r.body()[2]->cost().forward_flops + 8);
  CHECK(c.backward_weight_flops == 2.0 * 2 * 8 * 16);
  CHECK(c.activation_bytes == 8 * 4 + 16 * 4 + 16 * 4);

  const BoundParams bp = bind_random(r, backend(), 3);
  CHECK(r.body()[0]->params()[0].data() == bp.params[0].data());
  CHECK(r.body()[0]->grads()[1].data() == bp.grads[1].data());
  CHECK(r.body()[2]->params()[0].data() == bp.params[2].data());
  CHECK(r.body()[2]->grads()[1].data() == bp.grads[3].data());
  CHECK(r.body()[1]->params().empty());
}

TEST_CASE("cost().activation_bytes matches what forward saves; evaluation saves nothing") {
  Backend& be = backend();
  const int64_t B = 3;
  struct Case {
    std::unique_ptr<Layer> layer;
    bool ids = false;
  };
  std::vector<Case> cases;
  cases.push_back({std::make_unique<Linear>(Shape{4, 6}, 5)});
  cases.push_back({std::make_unique<ActivationLayer>(Shape{7}, Activation::relu)});
  cases.push_back({std::make_unique<ActivationLayer>(Shape{7}, Activation::tanh)});
  cases.push_back({std::make_unique<Dropout>(Shape{7}, 0.5f)});
  cases.push_back({std::make_unique<LayerNorm>(Shape{4, 6})});
  cases.push_back({std::make_unique<Embedding>(Shape{5}, 9, 4), true});
  cases.push_back({std::make_unique<Flatten>(Shape{2, 3})});
  cases.push_back({std::make_unique<Conv2d>(Shape{2, 5, 5}, 3, 3, 2, 1)});
  cases.push_back({std::make_unique<MaxPool2d>(Shape{2, 6, 6}, 3, 2, 1)});
  cases.push_back({std::make_unique<AvgPool2d>(Shape{2, 6, 6}, 2)});
  {
    std::vector<std::unique_ptr<Layer>> body;
    body.push_back(std::make_unique<LayerNorm>(Shape{6}));
    body.push_back(std::make_unique<Linear>(Shape{6}, 6));
    cases.push_back({std::make_unique<Residual>(Shape{6}, std::move(body))});
  }
  for (Case& c : cases) {
    Layer& l = *c.layer;
    INFO(l.kind());
    bind_random(l, be, 4);
    const Shape xs = l.input_shape().with_batch(B);
    const Tensor x = c.ids ? to_device_i32(be, random_ids(5, xs.numel(), 9), xs)
                           : to_device(be, random_uniform(5, xs.numel()), xs);
    const StepInfo train{1, 1, 0, true}, eval{1, 1, 0, false};
    LayerContext ct(be, train, 1), ce(be, eval, 1);
    CHECK(l.forward(x, ct).shape() == l.output_shape().with_batch(B));
    CHECK(ct.saved_bytes() == static_cast<size_t>(B * l.cost().activation_bytes));
    l.forward(x, ce);
    CHECK(ce.saved_bytes() == 0);
  }
}
