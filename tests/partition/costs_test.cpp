// Where costs come from: the roofline estimate and the measurement on the CPU backend.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "engine/core/error.h"
#include "engine/partition/layer_costs.h"
#include "engine/partition/step_overheads.h"
#include "engine/train/stage_parameters.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/builder.h"
#include "layers/zoo.h"

using namespace pt;

namespace {

// linear, save, relu, linear, add_saved, linear: a skip connection over layers 1..4.
Model residual_model() {
  return ModelBuilder({8})
      .linear(8)
      .save("x")
      .relu()
      .linear(8)
      .add_saved("x")
      .linear(3)
      .cross_entropy()
      .build();
}

}  // namespace

TEST_CASE("estimate_costs: every layer of fashion_cnn takes time, sizes follow the shapes") {
  const Model m = fashion_cnn();
  const int64_t B = 16;
  const auto c = estimate_costs(m, B);
  REQUIRE(c.size() == static_cast<size_t>(m.num_layers()));
  const auto big = estimate_costs(m, 4 * B);
  for (int l = 0; l < m.num_layers(); ++l) {
    const LayerProfile& p = c[static_cast<size_t>(l)];
    const Layer& layer = m.layer(l);
    INFO("layer ", l, " ", layer.name());
    CHECK(p.forward_s > 0);  // flatten and pooling too: they stream their tensors
    // The first conv's input gradient is never computed (nothing reads it): it costs nothing.
    CHECK((p.backward_input_s > 0) == m.needs_input_gradient(l));
    CHECK((p.backward_input_s > 0) == (l > 0));
    CHECK((p.backward_weight_s > 0) == (layer.param_count() > 0));
    CHECK(p.param_bytes == layer.param_count() * 4);
    CHECK(p.output_bytes == layer.output_shape().numel() * B * 4);
    CHECK(p.activation_bytes == layer.cost().activation_bytes * B);
    CHECK(big[static_cast<size_t>(l)].total_s() > p.total_s());  // more samples, more time
  }
  // The first conv: 2 * (32*28*28) * 1*3*3 FLOPs per sample, compute-bound at 100 GFLOP/s.
  CHECK(c[0].forward_s == doctest::Approx(2.0 * 32 * 28 * 28 * 9 * B / 100e9));
  CHECK_THROWS_AS(estimate_costs(m, 0), UsageError);
}

TEST_CASE("profile_costs: deep_mlp(2, 64) measured on the CPU backend") {
  // The backend first: layers that were unbound keep the profiling parameters (layer_costs.h).
  auto backend = make_cpu_backend(0, 1);
  const Model m = deep_mlp(2, 64);
  const auto c = profile_costs(m, *backend, 8, 3, 5);
  const auto e = estimate_costs(m, 8);
  REQUIRE(c.size() == 6);
  for (int l = 0; l < m.num_layers(); ++l) {
    const LayerProfile& p = c[static_cast<size_t>(l)];
    INFO("layer ", l, " ", m.layer(l).name());
    CHECK(p.forward_s > 0);
    // flatten and the first linear: no step computes their input gradients, none is charged.
    CHECK((p.backward_input_s > 0) == (l >= 2));
    CHECK((p.backward_weight_s > 0) == (m.layer(l).param_count() > 0));
    CHECK(p.total_s() < 1.0);  // a 64-wide layer on 8 samples: far below a second
    CHECK(p.param_bytes == e[static_cast<size_t>(l)].param_bytes);
    CHECK(p.output_bytes == e[static_cast<size_t>(l)].output_bytes);
    // What the layers really saved equals what their cost() declares.
    CHECK(p.activation_bytes == e[static_cast<size_t>(l)].activation_bytes);
  }
  CHECK_THROWS_AS(profile_costs(m, *backend, 8, 0), UsageError);
}

TEST_CASE("profile_costs: an i32 input gets valid token ids") {
  auto backend = make_cpu_backend(0, 1);
  const Model m =
      ModelBuilder({4}, DType::i32).embedding(50, 8).flatten().linear(3).cross_entropy().build();
  const auto c = profile_costs(m, *backend, 4, 1);
  REQUIRE(c.size() == 3);
  CHECK(c[0].forward_s > 0);
  CHECK(c[0].backward_weight_s > 0);
  CHECK(c[0].param_bytes == 50 * 8 * 4);
}

TEST_CASE("profile_costs: layers bound before (a trainer's stage) are bound back afterwards") {
  auto backend = make_cpu_backend(0, 1);
  const Model m = deep_mlp(1, 16);
  StageParameters stage(m, 0, m.num_layers(), *backend, 3);
  const void* weight = m.layer(1).params()[0].data();
  REQUIRE(weight == stage.param(0).data());
  (void)profile_costs(m, *backend, 4, 1);
  CHECK(m.layer(1).params()[0].data() == weight);
  CHECK(m.layer(1).grads()[0].data() == stage.grad(0).data());
}

TEST_CASE(
    "profile_costs: a model with a skip connection (save/add_saved) is profiled layer by layer") {
  auto backend = make_cpu_backend(0, 1);
  const Model m = residual_model();
  const auto c = profile_costs(m, *backend, 4, 2);
  REQUIRE(c.size() == static_cast<size_t>(m.num_layers()));
  for (int l = 0; l < m.num_layers(); ++l) {
    INFO("layer ", l, " ", m.layer(l).name());
    CHECK(c[static_cast<size_t>(l)].forward_s > 0);
    CHECK((c[static_cast<size_t>(l)].backward_input_s > 0) == (l > 0));  // none for the first
    CHECK(c[static_cast<size_t>(l)].output_bytes == 4 * m.layer(l).output_shape().numel() * 4);
  }
}

TEST_CASE("profile_costs_together: every device at once, each with its own model") {
  auto a = make_cpu_backend(0, 1), b = make_cpu_backend(1, 1);
  const auto make = [] { return deep_mlp(2, 64); };
  const Model m = make();
  const auto alone = profile_costs(m, *a, 8, 3, 5);
  const auto together = profile_costs_together(make, {a.get(), b.get()}, 8, 3, 5);
  REQUIRE(together.size() == alone.size());
  for (size_t l = 0; l < alone.size(); ++l) {
    INFO("layer ", l);
    CHECK(std::isfinite(together[l].total_s()));
    CHECK(together[l].forward_s > 0);
    CHECK((together[l].backward_input_s > 0) == (alone[l].backward_input_s > 0));
    CHECK((together[l].backward_weight_s > 0) == (alone[l].backward_weight_s > 0));
    CHECK(together[l].total_s() < 1.0);
    CHECK(together[l].param_bytes == alone[l].param_bytes);
    CHECK(together[l].activation_bytes == alone[l].activation_bytes);
    CHECK(together[l].output_bytes == alone[l].output_bytes);
  }
  // One device: profile_costs itself (the same bytes; times measured again).
  const auto one = profile_costs_together(make, {a.get()}, 8, 3, 5);
  REQUIRE(one.size() == alone.size());
  CHECK(one[1].param_bytes == alone[1].param_bytes);
  CHECK_THROWS_AS(profile_costs_together(make, {}, 8), UsageError);
}

TEST_CASE("profile_costs_together: each device runs a chunk, never cutting a skip connection") {
  // Three devices, two chunks at most where skips allow: every layer is timed by some device
  // (a layer no chunk covered would come back with zero times or bytes).
  auto a = make_cpu_backend(0, 1), b = make_cpu_backend(1, 1), c = make_cpu_backend(2, 1);
  // The skip spans every cut: no split exists and every device runs the whole model.
  const auto spanning = [] {
    return ModelBuilder({8}).save("x").linear(8).relu().linear(8).add_saved("x").mse().build();
  };
  for (const auto& make :
       {std::function<Model()>(residual_model), std::function<Model()>(spanning)}) {
    const Model m = make();
    const auto alone = profile_costs(m, *a, 4, 2, 7);
    for (const auto& devices : {std::vector<Backend*>{a.get(), b.get()},
                                std::vector<Backend*>{a.get(), b.get(), c.get()}}) {
      const auto together = profile_costs_together(make, devices, 4, 2, 7);
      REQUIRE(together.size() == alone.size());
      for (size_t l = 0; l < alone.size(); ++l) {
        INFO(devices.size(), " devices, layer ", l, " ", m.layer(static_cast<int>(l)).name());
        CHECK(together[l].forward_s > 0);
        CHECK(std::isfinite(together[l].total_s()));
        CHECK((together[l].backward_input_s > 0) == (alone[l].backward_input_s > 0));
        CHECK((together[l].backward_weight_s > 0) == (alone[l].backward_weight_s > 0));
        CHECK(together[l].param_bytes == alone[l].param_bytes);
        CHECK(together[l].activation_bytes == alone[l].activation_bytes);
        CHECK(together[l].output_bytes == alone[l].output_bytes);
      }
    }
  }
  CHECK_THROWS_AS(profile_costs_together(residual_model, {a.get(), b.get()}, 0), UsageError);
  CHECK_THROWS_AS(profile_costs_together(residual_model, {a.get(), b.get()}, 4, 0), UsageError);
}

TEST_CASE("step overheads: measured per parameter on every device at once; estimated by bytes") {
  auto a = make_cpu_backend(0, 1), b = make_cpu_backend(1, 1);
  OptimizerConfig sgd;  // momentum 0.9: one state tensor
  const StepOverheads m = measure_step_overheads({a.get(), b.get()}, sgd, 1 << 20, 3);
  // A pass over a parameter takes between a picosecond and a microsecond on any machine.
  for (const double s : {m.serial_s_per_param, m.update_s_per_param}) {
    CHECK(std::isfinite(s));
    CHECK(s > 1e-12);
    CHECK(s < 1e-6);
  }
  CHECK(m.seconds(1000, 10) ==
        doctest::Approx(1000 * m.serial_s_per_param + 10 * m.update_s_per_param));
  // The estimate: the norm streams 4 bytes per parameter; the update 4 x (3 + 2 slots).
  const StepOverheads e = estimate_step_overheads(2, 40e9);
  CHECK(e.serial_s_per_param == doctest::Approx(4 / 40e9));  // the norm reads the gradients
  CHECK(e.update_s_per_param == doctest::Approx(28 / 40e9));
  CHECK_THROWS_AS(measure_step_overheads({}, sgd, 16), UsageError);
  CHECK_THROWS_AS(measure_step_overheads({a.get()}, sgd, 0), UsageError);

  const AllReduceRate r = measure_in_process_allreduce({a.get(), b.get()}, 4 << 20, 3);
  CHECK(std::isfinite(r.bytes_per_second));
  CHECK(r.bytes_per_second > 1e7);   // 10 MB/s: far below any memory
  CHECK(r.bytes_per_second < 1e13);  // 10 TB/s: far above this machine's
  CHECK(std::isfinite(r.latency_s));
  CHECK(r.latency_s >= 0);
  CHECK(r.latency_s < 0.1);
  CHECK_THROWS_AS(measure_in_process_allreduce({a.get()}, 1024), UsageError);
}
