// Two things a pipeline must get right beyond plain stages:
// - tied parameters (Model::tie): each stage holding a copy sums the copies' gradients before
//   the step; the copies stay bit-identical and equal single-device training, for every schedule;
// - stages in other processes: the same runtime with some devices held elsewhere, reached
//   through a pipeline communicator. Here the "processes" are threads with an in-process
//   communicator, so the multi-process code path (remote transfers, the gradient-norm and tied
//   gradient exchanges, evaluation across processes) runs in every test build, TSan included.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <thread>

#include "../engine/synthetic.h"
#include "engine/comm/in_process.h"
#include "engine/core/error.h"
#include "engine/data/batching.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/builder.h"
#include "layers/zoo.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/validate.h"
#include "tests/pipeline/pipeline_test_util.h"

using namespace pt;

namespace {

constexpr int kSteps = 2;

// deep_mlp(3, 32): flatten, linear(32), relu, linear(32), relu, linear(32), relu, linear(10);
// the second and third linears (layers 3 and 5) both have a (32, 32) weight: tie them.
Model tied_mlp() {
  Model m = deep_mlp(3, 32, {1, 4, 4});
  m.tie(3, "weight", 5, "weight");
  return m;
}

// A skip from layer 2 to layer 7 that crosses every stage boundary of a 2..4-stage split, plus
// a tie: flatten, linear, save, relu, linear, relu, linear, add_saved, relu, linear.
Model skip_mlp() {
  ModelBuilder b(Shape{1, 4, 4});
  b.flatten().linear(32).save("x").relu().linear(32).relu().linear(32).add_saved("x").relu().linear(
      10);
  Model m = b.cross_entropy().build();
  m.tie(4, "weight", 6, "weight");
  return m;
}

TrainerConfig trainer_config(int M) {
  TrainerConfig c;
  c.microbatches = M;
  c.seed = 11;
  c.optimizer.kind = "adamw";
  c.optimizer.lr = 0.01f;
  c.lr = {LrSchedule::Kind::constant, 0.01f, 0, 0, 0.f};
  c.clip_norm = 0.5f;
  return c;
}

struct Data : test::SyntheticBatch {
  explicit Data(int64_t batch) : SyntheticBatch(batch, Shape{1, 4, 4}, 6) {}
};

// name -> values, over every stage held.

PipelineConfig config(const Model& m, const std::string& schedule, int D, int M) {
  return test::pipeline_config(m, trainer_config(M), schedule, D, M);
}

void check_against_single_device(const std::function<Model()>& make) {
  const Data data(12);
  for (int M : {1, 3, 4}) {  // M = 4 for dualpipev only (it needs M >= 2D)
    auto backend = make_cpu_backend(0, 1);
    Model ref_model = make();
    Trainer ref(ref_model, *backend, trainer_config(M));
    const auto before = test::params_by_name(ref.stage_states());
    for (int k = 0; k < kSteps; ++k) ref.train_step(data.x, data.y);
    const auto want = test::params_by_name(ref.stage_states());
    for (const ParameterTie& t : ref_model.ties()) {
      const auto name = [&](const ParamRef& r) {
        return parameter_name(r.layer, ref_model.layer(r.layer),
                              ref_model.layer(r.layer).param_specs()[r.param].name);
      };
      CHECK(before.at(name(t.members[0])) == before.at(name(t.members[1])));
      CHECK(want.at(name(t.members[0])) == want.at(name(t.members[1])));
      CHECK(want.at(name(t.members[0])) != before.at(name(t.members[0])));
    }

    // zbv: the tied first and last stages on one device (the V's two ends), skips across the V.
    for (const std::string schedule :
         {"gpipe", "1f1b", "zb-h1", "interleaved:2", "zbv", "dualpipev"})
      for (int D : {2, 3, 4}) {
        if (schedule == "interleaved:2" && (M % D != 0 || 2 * D > 8)) continue;
        if (schedule == "zbv" && 2 * D > 8) continue;
        // In a V the skip and the tie join stages on one device and on two.
        if ((schedule == "dualpipev") != (M == 4) || (M == 4 && 2 * D > M)) continue;
        CAPTURE(schedule);
        CAPTURE(D);
        CAPTURE(M);
        const test::CpuDevices cpus(D);
        const std::vector<Backend*>& devices = cpus.devices;
        Model m = make();
        PipelineTrainer t(m, devices, config(m, schedule, D, M));
        for (int k = 0; k < kSteps; ++k) t.train_step(data.x, data.y);
        CHECK(test::params_by_name(t.stage_states()) == want);  // bit for bit, both copies included
      }
  }
}

}  // namespace

TEST_CASE(
    "tied parameters: copies start equal, stay bit-identical, and match single-device training") {
  check_against_single_device(tied_mlp);
}

TEST_CASE(
    "a skip connection across stages (and a tie) matches single-device training bit for bit") {
  check_against_single_device(skip_mlp);
}

// Evaluation runs a forward-only schedule through the pipeline's executor: with 1..4 stages and a
// skip edge that crosses them, loss and accuracy are the single-device evaluation's bits.
TEST_CASE(
    "evaluation through the forward-only schedule equals single-device evaluation bit for bit") {
  const Data data(12);
  const int M = 2;
  auto backend = make_cpu_backend(0, 1);
  Model ref_model = skip_mlp();
  Trainer ref(ref_model, *backend, trainer_config(M));
  ref.train_step(data.x, data.y);
  for (int64_t chunk : {5, 12}) {  // chunks of 5, 5, 2 rows (three micro-batches), or one chunk
    const EvalStats want = ref.evaluate(data.x, data.y, chunk);
    REQUIRE(std::isfinite(want.loss));
    CHECK(want.loss > 0);
    for (const std::string schedule : {"1f1b", "interleaved:2"})
      for (int D : {1, 2, 3, 4}) {
        if (schedule == "interleaved:2" && (M % D != 0 || D == 1)) continue;
        CAPTURE(schedule);
        CAPTURE(D);
        CAPTURE(chunk);
        const test::CpuDevices cpus(D);
        Model m = skip_mlp();
        PipelineTrainer t(m, cpus.devices, config(m, schedule, D, M));
        t.train_step(data.x, data.y);
        const EvalStats got = t.evaluate(data.x, data.y, chunk);
        CHECK(got.loss == want.loss);  // NaN != NaN: a NaN fails here
        CHECK(got.accuracy == want.accuracy);
        CHECK(got.samples == 12);
      }
  }
}

TEST_CASE("skip connections: builder errors name the fix") {
  ModelBuilder b(Shape{8});
  CHECK_THROWS_WITH_AS(b.add_saved("y"), doctest::Contains("no skip named 'y' was saved"),
                       ShapeError);
  b.save("x").linear(4);
  CHECK_THROWS_WITH_AS(b.add_saved("x"),
                       doctest::Contains("the saved activation is (8) but the current one is (4)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(ModelBuilder(Shape{8}).save("x").linear(8).save("x"),
                       doctest::Contains("already saved"), ShapeError);
  CHECK_THROWS_WITH_AS(ModelBuilder(Shape{8}).save("x").linear(3).cross_entropy().build(),
                       doctest::Contains("saved but never added"), ShapeError);
  Model m = skip_mlp();
  REQUIRE(m.skip_edges().size() == 1);
  CHECK(m.skip_edges()[0].producer == 2);
  CHECK(m.skip_edges()[0].consumer == 7);
}

namespace {

TEST_CASE("tying refuses what cannot be one parameter") {
  Model m = deep_mlp(3, 32, {1, 4, 4});
  CHECK_THROWS_WITH_AS(m.tie(1, "weight", 3, "weight"),
                       doctest::Contains("has shape (32, 16) but 3.weight has (32, 32)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(m.tie(3, "gamma", 5, "weight"),
                       doctest::Contains("has no parameter 'gamma'"), ShapeError);
  CHECK_THROWS_WITH_AS(m.tie(3, "weight", 3, "weight"), doctest::Contains("itself"), ShapeError);
  m.tie(3, "weight", 5, "weight");
  CHECK_THROWS_WITH_AS(m.tie(5, "weight", 3, "weight"), doctest::Contains("already tied"),
                       ShapeError);
  CHECK(m.signature() != deep_mlp(3, 32, {1, 4, 4}).signature());  // checkpoints tell them apart
}

void check_split_processes(const std::function<Model()>& make) {
  const Data data(12);
  for (const auto& item :
       {std::tuple{std::string("1f1b"), 2, 3}, std::tuple{std::string("zb-h1"), 3, 2},
        std::tuple{std::string("interleaved:2"), 2, 2}}) {
    const auto& schedule = std::get<0>(item);
    const auto& D = std::get<1>(item);
    const auto& M = std::get<2>(item);
    CAPTURE(schedule);
    // Reference: the whole pipeline in one process.
    const test::CpuDevices cpus(D);
    const std::vector<Backend*>& devices = cpus.devices;
    Model one = make();
    PipelineTrainer whole(one, devices, config(one, schedule, D, M));
    std::vector<StepStats> want_stats;
    for (int k = 0; k < kSteps; ++k) want_stats.push_back(whole.train_step(data.x, data.y));
    const EvalStats want_eval = whole.evaluate(data.x, data.y, 5);
    const auto want = test::params_by_name(whole.stage_states());
    {  // the whole pipeline evaluates as one device does
      auto backend = make_cpu_backend(0, 1);
      Model ref_model = make();
      Trainer ref(ref_model, *backend, trainer_config(M));
      for (int k = 0; k < kSteps; ++k) ref.train_step(data.x, data.y);
      const EvalStats ref_eval = ref.evaluate(data.x, data.y, 5);
      CHECK(want_eval.loss == ref_eval.loss);
      CHECK(want_eval.accuracy == ref_eval.accuracy);
    }

    // D "processes", each holding one device.
    auto group = make_in_process_group(D, 20, "pipeline");
    std::vector<Model> models;
    for (int d = 0; d < D; ++d) models.push_back(make());
    std::vector<std::unique_ptr<PipelineTrainer>> parts;
    for (int d = 0; d < D; ++d) {
      PipelineConfig pc = config(models[static_cast<size_t>(d)], schedule, D, M);
      pc.parallel.pipeline_group = group[static_cast<size_t>(d)].get();
      std::vector<Backend*> mine(static_cast<size_t>(D), nullptr);
      mine[static_cast<size_t>(d)] = devices[static_cast<size_t>(d)];
      parts.push_back(std::make_unique<PipelineTrainer>(models[static_cast<size_t>(d)], mine, pc));
    }
    std::vector<std::vector<StepStats>> stats(static_cast<size_t>(D));
    std::vector<PipelineTrainer::EvalShare> evals(static_cast<size_t>(D));
    std::vector<std::thread> threads;
    for (int d = 0; d < D; ++d)
      threads.emplace_back([&, d] {
        for (int k = 0; k < kSteps; ++k)
          stats[static_cast<size_t>(d)].push_back(
              parts[static_cast<size_t>(d)]->train_step(data.x, data.y));
        evals[static_cast<size_t>(d)] =
            parts[static_cast<size_t>(d)]->evaluate_rows(data.x, data.y, 0, 12, 12, 5);
      });
    for (auto& t : threads) t.join();
    std::map<std::string, std::vector<float>> got;
    for (auto& p : parts)
      for (auto& [name, values] : test::params_by_name(p->stage_states())) got[name] = values;
    CHECK(got == want);
    for (int d = 0; d < D; ++d)
      for (int k = 0; k < kSteps; ++k)  // every process sees the same global norm
        CHECK(stats[static_cast<size_t>(d)][static_cast<size_t>(k)].grad_norm ==
              want_stats[static_cast<size_t>(k)].grad_norm);
    const PipelineTrainer& last = *parts.back();
    CHECK(last.holds_last_stage());
    CHECK(stats.back()[1].loss ==
          want_stats[1].loss);  // the loss is computed where the last stage is
    CHECK(evals.back().loss == want_eval.loss);
    CHECK(static_cast<double>(evals.back().correct) / 12.0 == want_eval.accuracy);
  }
}

}  // namespace

TEST_CASE("stages in other processes (in-process communicator): same bits as one process") {
  check_split_processes(tied_mlp);
  check_split_processes(skip_mlp);
}
