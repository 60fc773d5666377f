// The builder: shape inference, errors that name the layer, summary, signature, initialisation.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "engine/core/error.h"
#include "engine/train/stage_parameters.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/builder.h"
#include "layers/zoo.h"

using namespace pt;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("builder infers shapes through a CNN") {
  Model m = ModelBuilder({1, 28, 28})
                .conv2d(32, 3)
                .relu()
                .max_pool(2)
                .flatten()
                .linear(10)
                .name("head")
                .cross_entropy()
                .build();
  CHECK(m.num_layers() == 5);
  CHECK(m.layer(0).output_shape() == Shape{32, 26, 26});
  CHECK(m.layer(2).output_shape() == Shape{32, 13, 13});
  CHECK(m.layer(3).output_shape() == Shape{32 * 13 * 13});
  CHECK(m.output_shape() == Shape{10});
  CHECK(m.layer(4).name() == "head");
  CHECK(m.param_count() == 32 * 9 + 32 + 32 * 13 * 13 * 10 + 10);
  CHECK(parameter_name(4, m.layer(4), "weight") == "4.head.weight");
}

TEST_CASE("builder errors name the layer index, kind and both shapes") {
  // Linear acts on the last dimension (as in PyTorch), so (1, 28, 28) -> (1, 28, 10) is fine,
  // but a convolution needs (C, H, W) and gets (10).
  const std::string e1 = error_of([] {
    ModelBuilder({1, 28, 28}).flatten().linear(10).conv2d(4, 3);
  });
  CHECK(e1.find("layer 2") != std::string::npos);
  CHECK(e1.find("conv2d") != std::string::npos);
  CHECK(e1.find("(10)") != std::string::npos);

  const std::string e2 = error_of([] { ModelBuilder({1, 28, 28}).flatten().linear(0); });
  CHECK(e2.find("layer 1") != std::string::npos);

  const std::string e3 = error_of([] { ModelBuilder({1, 28, 28}).flatten().linear(10).build(); });
  CHECK(e3.find("no loss") != std::string::npos);

  const std::string e4 =
      error_of([] { ModelBuilder({8}).residual([](ModelBuilder& b) { b.linear(4); }); });
  CHECK(e4.find("residual") != std::string::npos);

  CHECK_THROWS_AS(ModelBuilder({1, 0, 28}), ShapeError);
  CHECK_THROWS_AS(ModelBuilder({4}).linear(3).name("has.dot"), ShapeError);
  CHECK_THROWS_AS(ModelBuilder({4}).conv2d(3, 3), ShapeError);  // conv needs (C, H, W)
}

TEST_CASE("residual blocks nest and number their parameters") {
  Model m = ModelBuilder({16})
                .linear(16)
                .residual([](ModelBuilder& b) { b.layer_norm().linear(32).gelu().linear(16); })
                .linear(4)
                .mse()
                .build();
  CHECK(m.num_layers() == 3);
  CHECK(m.layer(1).kind() == "residual");
  CHECK(m.layer(1).param_count() == 16 * 2 + 16 * 32 + 32 + 32 * 16 + 16);
  CHECK(m.summary().find("residual") != std::string::npos);
}

TEST_CASE("summary lists every layer with output shape and parameters") {
  Model m = fashion_mlp();
  const std::string s = m.summary();
  CHECK(s.find("output shape") != std::string::npos);
  CHECK(s.find("(1024)") != std::string::npos);
  CHECK(s.find("803840") != std::string::npos);  // 784*1024 + 1024
  CHECK(m.param_count() == 784 * 1024 + 1024 + 3 * (1024 * 1024 + 1024) + 1024 * 10 + 10);
}

TEST_CASE("initialisation depends on (seed, global layer index), not on the partition") {
  auto backend = make_cpu_backend(0, 1);
  Model whole = deep_mlp(3, 32);
  Model split = deep_mlp(3, 32);
  StageParameters all(whole, 0, whole.num_layers(), *backend, 7);
  StageParameters tail(split, 3, split.num_layers(), *backend, 7);
  // Layer 3 is a linear layer in both; its weight must be identical.
  const auto find = [](const StageParameters& p, const std::string& name) {
    for (size_t i = 0; i < p.entries().size(); ++i)
      if (p.entries()[i].name == name) return p.param(i);
    FAIL("missing " << name);
    return Tensor();
  };
  const Tensor a = find(all, "3.linear.weight"), b = find(tail, "3.linear.weight");
  REQUIRE(a.numel() == b.numel());
  CHECK(std::memcmp(a.data(), b.data(), a.bytes()) == 0);
  // PyTorch's bound for Linear(32, 32): 1/sqrt(32).
  float max_abs = 0;
  for (int64_t i = 0; i < a.numel(); ++i) max_abs = std::max(max_abs, std::abs(a.f32()[i]));
  CHECK(max_abs <= 1.f / std::sqrt(32.f));
  CHECK(max_abs > 0.8f / std::sqrt(32.f));
  // Another seed gives other values.
  Model other = deep_mlp(3, 32);
  StageParameters reseeded(other, 0, other.num_layers(), *backend, 8);
  CHECK(std::memcmp(find(reseeded, "3.linear.weight").data(), a.data(), a.bytes()) != 0);
}

TEST_CASE("signature changes with the architecture") {
  CHECK(fashion_mlp().signature() == fashion_mlp().signature());
  CHECK(fashion_mlp().signature() != fashion_cnn().signature());
}
