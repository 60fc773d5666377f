// Adjacent forwards taking turns (--tp-overlap on, engine/pipeline/executor.cpp): with T > 1 a
// device runs two forwards of its list that are next to each other (or have only the first's
// SEND_F between them) and whose inputs are here at once, and lets the second compute while the
// first waits at a collective. What pairs is read off the list: a probe layer that passes the
// turn where a collective would records the order the two micro-batches ran in on each device.
// The group's part (a blocking collective started, the turn passed, then waited for) is tested
// in overlap_test.cpp, the bits of whole training runs in training_test.cpp.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/comm/take_turns.h"
#include "engine/replicas/data_parallel_trainer.h"
#include "layers/activation.h"
#include "layers/linear.h"
#include "layers/losses.h"
#include "tests/pipeline/pipeline_test_util.h"

using namespace pt;
using namespace pt::test;

namespace {

// What each device's probes saw, in order: "F<m>" when a forward of micro-batch m reached the
// probe, "F<m>'" when it went on after passing the turn.
struct ProbeLog {
  std::mutex mutex;
  std::map<const Backend*, std::vector<std::string>> by_device;
  void add(const Backend& device, const std::string& entry) {
    std::lock_guard lock(mutex);
    by_device[&device].push_back(entry);
  }
};

// The identity, passing the turn in its forward where a row-parallel layer's all-reduce would.
class Probe final : public Layer {
 public:
  Probe(Shape in, ProbeLog& log) : Layer("probe", in), log_(&log) { output_shape_ = in; }
  std::string_view kind() const override { return "probe"; }
  LayerCost cost() const override { return {}; }
  Tensor forward(const Tensor& x, LayerContext& ctx) override {
    if (ctx.info().training) {
      const int m = ctx.info().microbatch;
      log_->add(ctx.backend(), fmt::format("F{}", m));
      TakeTurns::pass();
      log_->add(ctx.backend(), fmt::format("F{}'", m));
    }
    return copy(x, ctx);
  }
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override { return copy(dy, ctx); }

 private:
  static Tensor copy(const Tensor& x, LayerContext& ctx) {
    Tensor y = ctx.alloc(x.shape());
    ctx.backend().fill(y.f32(), 0.f, y.numel());
    ctx.backend().axpy(1.f, x.f32(), y.f32(), y.numel());
    return y;
  }
  ProbeLog* log_;
};

// linear, probe, relu | linear, probe: one probe in each stage at S = 2 (split 3 + 2).
Model probed_mlp(ProbeLog& log) {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Linear>(Shape{8}, 8));
  layers.push_back(std::make_unique<Probe>(Shape{8}, log));
  layers.push_back(std::make_unique<ActivationLayer>(Shape{8}, Activation::relu));
  layers.push_back(std::make_unique<Linear>(Shape{8}, 10));
  layers.push_back(std::make_unique<Probe>(Shape{10}, log));
  return Model(Shape{8}, DType::f32, std::move(layers),
               std::make_unique<SoftmaxCrossEntropy>(Shape{10}));
}

TrainerConfig config(int M) {
  TrainerConfig c;
  c.microbatches = M;
  c.seed = 3;
  c.optimizer.kind = "sgd";
  c.optimizer.lr = 0.05f;
  return c;
}

// One training step of the probed MLP at R = 1, D devices, T = 2; each device's log.
std::vector<std::vector<std::string>> step_log(const std::string& schedule, int D, int M,
                                               bool forwards_take_turns) {
  ProbeLog log;
  CpuDevices devices(D * 2);
  const auto make = [&] { return probed_mlp(log); };
  PipelineConfig pc = pipeline_config(make(), config(M), schedule, D, M);
  pc.parallel.tensor_parallel_overlap_forwards = forwards_take_turns;
  auto trainer = make_local_data_parallel(make, devices.devices, pc, 1, 2);
  const SyntheticBatch b(8, Shape{8});
  log.by_device.clear();
  trainer->train_step(b.x, b.y);
  std::vector<std::vector<std::string>> out;
  for (Backend* d : devices.devices) out.push_back(log.by_device[d]);
  return out;
}

using Log = std::vector<std::string>;

}  // namespace

TEST_CASE("gpipe on one stage: forwards 0 and 1, then 2 and 3, take turns at the probes") {
  const auto logs = step_log("gpipe", 1, 4, true);
  // Each forward passes the turn at two probes; a piece goes on where the other passed.
  const Log paired = {"F0", "F1", "F0'", "F0", "F1'", "F1", "F0'", "F1'",   // 0 and 1
                      "F2", "F3", "F2'", "F2", "F3'", "F3", "F2'", "F3'"};  // 2 and 3
  for (const Log& l : logs) CHECK(l == paired);  // both tensor ranks alike

  const Log one_by_one = {"F0", "F0'", "F0", "F0'", "F1", "F1'", "F1", "F1'",
                          "F2", "F2'", "F2", "F2'", "F3", "F3'", "F3", "F3'"};
  for (const Log& l : step_log("gpipe", 1, 4, false))
    CHECK(l == one_by_one);  // --tp-overlap backward
}

TEST_CASE("1f1b on one stage has no adjacent forwards: each runs alone") {
  for (const Log& l : step_log("1f1b", 1, 3, true))
    CHECK(l == Log{"F0", "F0'", "F0", "F0'", "F1", "F1'", "F1", "F1'", "F2", "F2'", "F2", "F2'"});
}

TEST_CASE("gpipe on two stages: the first pairs across its SEND_F, the last (RECV_F between) not") {
  // Devices: tensor rank t of stage s is device s * 2 + t (T innermost).
  const auto logs = step_log("gpipe", 2, 2, true);
  REQUIRE(logs.size() == 4);
  for (int t = 0; t < 2; ++t) {
    CHECK(logs[static_cast<size_t>(t)] == Log{"F0", "F1", "F0'", "F1'"});      // stage 0
    CHECK(logs[static_cast<size_t>(2 + t)] == Log{"F0", "F0'", "F1", "F1'"});  // stage 1
  }
}
