// Every constructor refuses shapes that do not fit, and sizes <= 0, with a message that names
// the layer kind, what it expected and what it got. Forward/backward misuse is refused too.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "layers/layers.h"
#include "tests/layers/gradcheck.h"

using namespace pt;
using namespace pt::test;

TEST_CASE("linear shape errors") {
  CHECK_THROWS_WITH_AS(Linear(Shape{}, 4), "linear: expects input (..., in_features) but got ()",
                       ShapeError);
  CHECK_THROWS_WITH_AS(Linear(Shape{784}, 0), "linear: out_features must be positive but got 0",
                       ShapeError);
  CHECK_THROWS_WITH_AS(Linear(Shape{784}, -3), "linear: out_features must be positive but got -3",
                       ShapeError);
  CHECK_THROWS_WITH_AS(
      Linear(Shape{0}, 3),
      "linear: in_features (the input's last dimension) must be positive but got 0", ShapeError);
  CHECK_THROWS_WITH_AS(Linear(Shape{0, 5}, 3), "linear: input size must be positive but got 0",
                       ShapeError);
  CHECK_THROWS_WITH_AS(
      Linear::check_in_features(Shape{1, 28, 28}, 784),
      "linear: expects input (..., 784) but got (1, 28, 28); add .flatten() before it", ShapeError);
  CHECK_THROWS_WITH_AS(Linear::check_in_features(Shape{100}, 784),
                       "linear: expects input (..., 784) but got (100)", ShapeError);
  CHECK_NOTHROW(Linear::check_in_features(Shape{3, 784}, 784));
}

TEST_CASE("activation, dropout, layernorm shape errors") {
  CHECK_THROWS_WITH_AS(ActivationLayer(Shape{0, 3}, Activation::relu),
                       "relu: input size must be positive but got 0", ShapeError);
  CHECK_THROWS_WITH_AS(ActivationLayer(Shape{4, -1}, Activation::gelu_erf),
                       "gelu: input size must be positive but got -4", ShapeError);
  CHECK_THROWS_WITH_AS(Dropout(Shape{0}, 0.1f), "dropout: input size must be positive but got 0",
                       ShapeError);
  CHECK_THROWS_WITH_AS(LayerNorm(Shape{}), "layernorm: expects input (..., C) but got ()",
                       ShapeError);
  CHECK_THROWS_WITH_AS(LayerNorm(Shape{3, 0}), "layernorm: input size must be positive but got 0",
                       ShapeError);
  CHECK_THROWS_WITH_AS(LayerNorm(Shape{8}, 0.f), "layernorm: eps must be positive but got 0",
                       ShapeError);
}

TEST_CASE("embedding shape errors") {
  CHECK_THROWS_WITH_AS(Embedding(Shape{8}, 0, 4), "embedding: vocab must be positive but got 0",
                       ShapeError);
  CHECK_THROWS_WITH_AS(Embedding(Shape{8}, 10, -1), "embedding: dim must be positive but got -1",
                       ShapeError);
  CHECK_THROWS_WITH_AS(Embedding(Shape{0}, 10, 4),
                       "embedding: input size must be positive but got 0", ShapeError);
  CHECK_THROWS_WITH_AS(
      Embedding((Shape{1, 2, 3, 4, 5}), 10, 4),
      "embedding: expects ids of rank below 5 (usually (T)) but got (1, 2, 3, 4, 5)", ShapeError);
}

TEST_CASE("flatten and reshape shape errors") {
  CHECK_THROWS_WITH_AS(Reshape(Shape{12}, Shape{5, 2}),
                       "reshape: cannot reshape (12) (12 elements) to (5, 2) (10 elements)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(Reshape(Shape{12}, Shape{-1, 12}),
                       "reshape: every output dimension must be positive but got (-1, 12)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(Flatten(Shape{3, 0}),
                       "flatten: every input dimension must be positive but got (3, 0)",
                       ShapeError);
  CHECK(Flatten(Shape{1, 28, 28}).output_shape() == Shape{784});
}

TEST_CASE("conv2d shape errors") {
  CHECK_THROWS_WITH_AS(Conv2d(Shape{784}, 8, 3), "conv2d: expects input (C, H, W) but got (784)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(
      Conv2d(Shape{1, 2, 2}, 8, 5),
      "conv2d: kernel 5 is larger than the padded input (1, 2, 2) (H, W = 2, 2 with padding 0)",
      ShapeError);
  CHECK_THROWS_WITH_AS(Conv2d(Shape{1, 8, 8}, 0, 3),
                       "conv2d: out_channels must be positive but got 0", ShapeError);
  CHECK_THROWS_WITH_AS(Conv2d(Shape{1, 8, 8}, 4, 0), "conv2d: kernel must be positive but got 0",
                       ShapeError);
  CHECK_THROWS_WITH_AS(Conv2d(Shape{1, 8, 8}, 4, 3, 0), "conv2d: stride must be positive but got 0",
                       ShapeError);
  CHECK_THROWS_WITH_AS(Conv2d(Shape{1, 8, 8}, 4, 3, 1, -1),
                       "conv2d: padding must be >= 0 but got -1", ShapeError);
  CHECK_THROWS_WITH_AS(Conv2d(Shape{0, 8, 8}, 4, 3),
                       "conv2d: input size must be positive but got 0", ShapeError);
}

TEST_CASE("pool shape errors") {
  CHECK_THROWS_WITH_AS(MaxPool2d(Shape{10}, 2), "maxpool2d: expects input (C, H, W) but got (10)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(AvgPool2d(Shape{2, 5}, 2),
                       "avgpool2d: expects input (C, H, W) but got (2, 5)", ShapeError);
  CHECK_THROWS_WITH_AS(MaxPool2d(Shape{1, 4, 4}, 2, 2, 2),
                       "maxpool2d: padding must be in [0, kernel / 2] = [0, 1] but got 2",
                       ShapeError);
  CHECK_THROWS_WITH_AS(
      AvgPool2d(Shape{1, 2, 2}, 3),
      "avgpool2d: kernel 3 is larger than the padded input (1, 2, 2) (H, W = 2, 2 with padding 0)",
      ShapeError);
  CHECK_THROWS_WITH_AS(MaxPool2d(Shape{1, 4, 4}, 0), "maxpool2d: kernel must be positive but got 0",
                       ShapeError);
  CHECK_THROWS_WITH_AS(MaxPool2d(Shape{1, 4, 4}, 2, -1),
                       "maxpool2d: stride must be positive but got -1", ShapeError);
  // stride 0 means stride = kernel
  const MaxPool2d p(Shape{3, 28, 28}, 2);
  CHECK(p.stride() == 2);
  CHECK(p.output_shape() == Shape{3, 14, 14});
}

TEST_CASE("residual shape errors") {
  {
    std::vector<std::unique_ptr<Layer>> body;
    body.push_back(std::make_unique<Linear>(Shape{4}, 3));
    CHECK_THROWS_WITH_AS(
        Residual(Shape{4}, std::move(body)),
        "residual: the body maps (4) to (3); its output must equal its input to add them",
        ShapeError);
  }
  {
    std::vector<std::unique_ptr<Layer>> body;
    body.push_back(std::make_unique<Linear>(Shape{4}, 3));
    body.push_back(std::make_unique<Linear>(Shape{5}, 4));
    CHECK_THROWS_WITH_AS(Residual(Shape{4}, std::move(body)),
                         "residual: body layer 1 (linear) expects input (5) but gets (3)",
                         ShapeError);
  }
  {
    std::vector<std::unique_ptr<Layer>> body;
    body.push_back(std::make_unique<Embedding>(Shape{4}, 10, 4));
    CHECK_THROWS_WITH_AS(
        Residual(Shape{4}, std::move(body)),
        "residual: body layer 0 (embedding) takes I32 input; the residual stream is F32",
        ShapeError);
  }
  CHECK_THROWS_WITH_AS(Residual(Shape{4}, {}),
                       "residual: the body is empty; add at least one layer", ShapeError);
}

TEST_CASE("forward and backward refuse misuse") {
  Backend& be = backend();
  const StepInfo train{1, 1, 0, true};
  const StepInfo eval{1, 1, 0, false};

  Linear l(Shape{6}, 4);
  LayerContext c0(be, train, 1);
  CHECK_THROWS_WITH_AS(l.forward(be.zeros(Shape{5, 6}), c0),
                       "linear: parameters are not bound; call bind() before forward", UsageError);
  bind_random(l, be, 1);
  CHECK_THROWS_WITH_AS(l.forward(be.zeros(Shape{5, 7}), c0),
                       "linear: expects input (B, 6) but got (5, 7)", ShapeError);
  l.set_name("fc1");
  CHECK_THROWS_WITH_AS(l.forward(be.zeros(Shape{6}), c0),
                       "linear 'fc1': expects input (B, 6) but got (6)", ShapeError);
  CHECK_THROWS_WITH_AS(l.forward(be.zeros(Shape{5, 6}, DType::i32), c0),
                       "linear 'fc1': expects input of type F32 but got I32", ShapeError);
  CHECK_THROWS_WITH_AS(l.backward_input(be.zeros(Shape{5, 3}), c0),
                       "linear 'fc1': expects gradient (B, 4) but got (5, 3)", ShapeError);

  // Evaluation saves nothing, so backward after it is refused with a reason.
  LayerContext ce(be, eval, 1);
  const Tensor y = l.forward(be.zeros(Shape{5, 6}), ce);
  CHECK(ce.saved_count() == 0);
  CHECK_THROWS_WITH_AS(l.backward_weight(y, ce),
                       "linear 'fc1': backward found nothing saved by forward (was forward run in "
                       "evaluation mode, or the context cleared before backward?)",
                       UsageError);

  // A residual's backward_weight needs its backward_input first (it keeps the body's dys).
  std::vector<std::unique_ptr<Layer>> body;
  body.push_back(std::make_unique<Linear>(Shape{4}, 4));
  body.push_back(std::make_unique<ActivationLayer>(Shape{4}, Activation::tanh));
  Residual r(Shape{4}, std::move(body));
  bind_random(r, be, 2);
  LayerContext cr(be, train, 1);
  const Tensor yr = r.forward(be.zeros(Shape{2, 4}), cr);
  CHECK_THROWS_AS(r.backward_weight(yr, cr), UsageError);
  r.backward_input(yr, cr);
  CHECK_NOTHROW(r.backward_weight(yr, cr));
  CHECK_THROWS_AS(r.backward_input(yr, cr), UsageError);  // twice without clear()
  cr.clear();
  r.forward(be.zeros(Shape{2, 4}), cr);  // recomputation after clear() works
  CHECK_NOTHROW(r.backward_input(yr, cr));
}
