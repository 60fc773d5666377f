// The input gradient of a layer with no parameters before it is never computed (nobody reads
// it: an MLP's first Linear would spend a GEMM on it), on one device and in a pipeline, except
// where a stage before waits for it; the trained parameters are what they were.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "layers/builder.h"
#include "layers/losses.h"
#include "pipeline_test_util.h"

using namespace pt;

namespace {

// Runs `inner` and counts its backward_input calls.
class Counting final : public Layer {
 public:
  explicit Counting(Layer& inner) : Layer(inner.name(), inner.input_shape()), inner_(&inner) {
    output_shape_ = inner.output_shape();
  }
  std::string_view kind() const override { return inner_->kind(); }
  std::vector<ParamSpec> param_specs() const override { return inner_->param_specs(); }
  LayerCost cost() const override { return inner_->cost(); }
  void bind(std::span<const Tensor> params, std::span<const Tensor> grads) override {
    inner_->bind(params, grads);
    Layer::bind(params, grads);
  }
  void unbind() override {
    inner_->unbind();
    Layer::unbind();
  }
  Tensor forward(const Tensor& x, LayerContext& ctx) override { return inner_->forward(x, ctx); }
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override {
    ++input_gradients;
    return inner_->backward_input(dy, ctx);
  }
  void backward_weight(const Tensor& dy, LayerContext& ctx) override {
    inner_->backward_weight(dy, ctx);
  }
  int input_gradients = 0;

 private:
  Layer* inner_;
};

// flatten, linear, relu, linear: the layers of `inner` behind counters.
struct CountedMlp {
  Model inner;
  Model model;
  std::vector<Counting*> counters;
  CountedMlp()
      : inner(ModelBuilder(Shape{1, 4, 4})
                  .flatten()
                  .linear(8)
                  .relu()
                  .linear(10)
                  .cross_entropy()
                  .build()) {
    std::vector<std::unique_ptr<Layer>> layers;
    for (int l = 0; l < inner.num_layers(); ++l) {
      layers.push_back(std::make_unique<Counting>(inner.layer(l)));
      counters.push_back(static_cast<Counting*>(layers.back().get()));
    }
    model = Model(Shape{1, 4, 4}, DType::f32, std::move(layers),
                  std::make_unique<SoftmaxCrossEntropy>(Shape{10}));
  }
  std::vector<int> counts() const {
    std::vector<int> out;
    for (const Counting* c : counters) out.push_back(c->input_gradients);
    return out;
  }
};

TrainerConfig config(int M) {
  TrainerConfig c;
  c.microbatches = M;
  c.seed = 3;
  c.optimizer.kind = "sgd";
  c.optimizer.lr = 0.1f;
  c.lr = {LrSchedule::Kind::constant, 0.1f, 0, 0, 0.f};
  return c;
}

}  // namespace

TEST_CASE("needs_input_gradient: false up to and including the first layer with parameters") {
  const CountedMlp m;
  CHECK_FALSE(m.model.needs_input_gradient(0));  // flatten
  CHECK_FALSE(m.model.needs_input_gradient(1));  // the first linear
  CHECK(m.model.needs_input_gradient(2));
  CHECK(m.model.needs_input_gradient(3));
}

TEST_CASE("the trainer computes no input gradient that nobody reads") {
  auto backend = make_cpu_backend(0, 1);
  test::SyntheticBatch b(6, Shape{1, 4, 4});
  CountedMlp m;
  Trainer t(m.model, *backend, config(3));
  t.train_step(b.x, b.y);
  CHECK(m.counts() == std::vector<int>{0, 0, 3, 3});
}

TEST_CASE("a pipeline computes an input gradient only where a layer or a stage before needs it") {
  test::SyntheticBatch b(6, Shape{1, 4, 4});
  auto backend = make_cpu_backend(0, 1);
  CountedMlp ref;
  Trainer reference(ref.model, *backend, config(3));
  reference.train_step(b.x, b.y);
  const auto want = test::params_by_name(reference.stage_states());
  // {layers per stage}, expected backward_input calls per layer
  const std::vector<std::pair<std::vector<int>, std::vector<int>>> cases{
      {{2, 2}, {0, 0, 3, 3}},  // the first linear on stage 0: skipped
      {{1, 3}, {0, 3, 3, 3}},  // the first linear starts stage 1: stage 0 waits for its gradient
  };
  for (const auto& item : cases) {
    const auto& split = std::get<0>(item);
    const auto& expected = std::get<1>(item);
    CAPTURE(split[0]);
    for (const char* schedule : {"1f1b", "zb-h1"}) {  // B, and I + W apart
      CAPTURE(schedule);
      test::CpuDevices devices(2);
      CountedMlp m;
      PipelineConfig pc = test::pipeline_config(m.model, config(3), schedule, 2, 3);
      pc.layers_per_stage = split;
      PipelineTrainer t(m.model, devices.devices, pc);
      t.train_step(b.x, b.y);
      CHECK(m.counts() == expected);
      CHECK(test::params_by_name(t.stage_states()) == want);  // NaN fails too
    }
  }
}
