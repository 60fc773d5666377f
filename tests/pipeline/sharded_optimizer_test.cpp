// --shard-optimizer (ZeRO-1) in one process: R replicas, each stepping 1/R of every stage's
// tensors with an optimizer whose state covers only them. The guarantee checked: a sharded run's
// parameters, losses and gradient norms are the same bits as the unsharded data-parallel run
// with the same R, S and M (gradients are summed in the same order, the norm is added in the
// same order, the optimizer is elementwise), with SGD+momentum (clipping active) and AdamW, with
// a tie across stages; the state per replica is ~1/R; checkpoints are the unsharded format and a
// resumed sharded run continues bit-identically.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <unistd.h>

#include "../engine/synthetic.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/core/error.h"
#include "engine/parallel/optimizer_shards.h"
#include "engine/replicas/data_parallel_trainer.h"
#include "engine/report/compare.h"
#include "engine/setup/training_options.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"
#include "schedule/lowering.h"
#include "tests/pipeline/pipeline_test_util.h"

using namespace pt;

namespace {

constexpr int kSteps = 4;

// deep_mlp(3, 32): layers 3 and 5 have (32, 32) weights; tied, and in different stages for S=2.
Model tied_mlp() {
  Model m = deep_mlp(3, 32, {1, 4, 4});
  m.tie(3, "weight", 5, "weight");
  return m;
}

TrainerConfig trainer_config(const std::string& optimizer, int M, float clip) {
  TrainerConfig c;
  c.microbatches = M;
  c.seed = 5;
  c.optimizer.kind = optimizer;
  c.optimizer.lr = optimizer == "sgd" ? 0.05f : 0.01f;
  c.optimizer.momentum = 0.9f;
  c.optimizer.weight_decay = 0.01f;
  c.lr = {LrSchedule::Kind::constant, c.optimizer.lr, 0, 0, 0.f};
  c.clip_norm = clip;
  return c;
}

using Data = test::SyntheticBatch;

struct Run {
  test::CpuDevices devices;
  std::unique_ptr<DataParallelTrainer> trainer;
  Run(const std::function<Model()>& make, const TrainerConfig& tc, int D, int R, int M, bool shard)
      : devices(R * D) {
    PipelineConfig pc = test::pipeline_config(make(), tc, "1f1b", D, M);
    pc.schedule = sched::add_grad_reduction(pc.schedule);
    pc.parallel.bucket_bytes = size_t{1} << 10;
    pc.parallel.shard_optimizer = shard;
    trainer = make_local_data_parallel(make, devices.devices, pc, R);
  }
  // Every replica's parameters by name.
  std::vector<std::map<std::string, std::vector<float>>> params() const {
    std::vector<std::map<std::string, std::vector<float>>> out;
    for (int r = 0; r < trainer->local_replicas(); ++r)
      out.push_back(test::params_by_name(trainer->replica(r).stage_states()));
    return out;
  }
};

bool same_bits(const std::map<std::string, std::vector<float>>& a,
               const std::map<std::string, std::vector<float>>& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (const auto& [name, v] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != v.size()) return false;
    // NaN != NaN: compare values, not only bytes, so a NaN on both sides fails.
    for (size_t i = 0; i < v.size(); ++i)
      if (!(v[i] == it->second[i]) || std::memcmp(&v[i], &it->second[i], sizeof(float)) != 0)
        return false;
  }
  return true;
}

}  // namespace

TEST_CASE("sharded optimizer: whole-tensor ranges tile the arena, balanced by bytes") {
  Model m = deep_mlp(3, 32, {1, 4, 4});
  auto backend = make_cpu_backend(0, 1);
  StageParameters params(m, 0, m.num_layers(), *backend, 1);
  const int64_t total = params.params_flat().numel();
  for (int R : {1, 2, 3, 4, 16}) {
    CAPTURE(R);
    const auto ranges = plan_optimizer_shards(params, R);
    REQUIRE(ranges.size() == static_cast<size_t>(R));
    int64_t at = 0;
    size_t entry = 0;
    for (const ShardRange& r : ranges) {
      CHECK(r.offset == at);
      CHECK(r.first_entry == entry);
      at += r.count;
      entry = r.end_entry;
    }
    CHECK(at == total);
    CHECK(entry == params.entries().size());
  }
  // 2 replicas: (16x32 + 32 + 32x32 + 32) vs (32 + 32x32 + 32 + 32x10 + 10) floats, within one
  // tensor of half.
  const auto two = plan_optimizer_shards(params, 2);
  CHECK(two[0].count > 0);
  CHECK(two[1].count > 0);
  CHECK(std::abs(two[0].count - two[1].count) <= 32 * 32 + 16);
}

TEST_CASE("sharded optimizer: bit-identical to unsharded data parallelism") {
  const Data data(16, Shape{1, 4, 4});
  struct Case {
    std::string optimizer;
    float clip;
    int D, R, M;
  };
  for (const Case& c :
       {Case{"sgd", 0.05f, 1, 2, 1}, Case{"sgd", 0.05f, 2, 2, 2}, Case{"adamw", 0.f, 1, 2, 2},
        Case{"adamw", 0.f, 2, 2, 1}, Case{"adamw", 0.05f, 2, 3, 1}, Case{"sgd", 0.f, 2, 3, 2},
        Case{"adamw", 0.f, 2, 8, 1}}) {
    CAPTURE(c.optimizer);
    CAPTURE(c.clip);
    CAPTURE(c.D);
    CAPTURE(c.R);
    CAPTURE(c.M);
    const TrainerConfig tc = trainer_config(c.optimizer, c.M, c.clip);
    Run plain(tied_mlp, tc, c.D, c.R, c.M, false);
    Run sharded(tied_mlp, tc, c.D, c.R, c.M, true);
    bool clipped = false;
    for (int k = 0; k < kSteps; ++k) {
      const StepStats a = plain.trainer->train_step(data.x, data.y);
      const StepStats b = sharded.trainer->train_step(data.x, data.y);
      CHECK(std::memcmp(&a.grad_norm, &b.grad_norm, sizeof(double)) == 0);
      CHECK(a.loss == b.loss);
      CHECK(std::isfinite(b.loss));
      clipped = clipped || (c.clip > 0 && b.grad_norm > c.clip);
    }
    if (c.clip > 0) CHECK(clipped);  // the clipping path is exercised
    const auto want = plain.params();
    const auto got = sharded.params();
    for (int r = 0; r < c.R; ++r) CHECK(same_bits(got[static_cast<size_t>(r)], want[0]));
    // Training moved the parameters (a sharded step that did nothing would fail the above too,
    // unless the unsharded one also did nothing).
    Run fresh(tied_mlp, tc, c.D, c.R, c.M, false);
    CHECK_FALSE(same_bits(fresh.params()[0], want[0]));
    // Optimizer state per replica: its shard, ~1/R; the shards add up to the unsharded state.
    size_t sum = 0;
    const size_t full = sharded.trainer->replica(0).unsharded_optimizer_state_bytes();
    CHECK(full == plain.trainer->replica(0).optimizer_state_bytes());
    for (int r = 0; r < c.R; ++r) {
      const size_t mine = sharded.trainer->replica(r).optimizer_state_bytes();
      sum += mine;
      if (tc.optimizer.state_slots() > 0) {
        // R = 8 over stages of 4 tensors: half the replicas own nothing (and still step).
        if (c.R <= 3) CHECK(mine > 0);
        CHECK(mine < full);
        // Within one (32 x 32) tensor per slot and stage of an exact 1/R split.
        CHECK(std::abs(static_cast<double>(mine) - static_cast<double>(full) / c.R) <=
              static_cast<double>(c.D * tc.optimizer.state_slots() * 33 * 32 * 4));
      }
    }
    CHECK(sum == full);
  }
}

// GPT's tied embeddings (tok_emb and lm_head share one weight) in different stages for S=2, and
// the tied tensor in one replica's range while its copy is in the other's.
TEST_CASE("sharded optimizer: tiny GPT with tied embeddings, bit-identical to unsharded") {
  constexpr int64_t kVocab = 32, kContext = 8, B = 8;
  const auto make = [] { return gpt(kVocab, kContext, 16, 2, 2); };
  std::vector<int32_t> x(static_cast<size_t>(B * kContext)), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>((i * 13 + 5) % kVocab);
    y[i] = static_cast<int32_t>((x[i] * 7 + 3) % kVocab);
  }
  const Tensor hx = Tensor::borrow(x.data(), Shape{B, kContext}, DType::i32);
  const Tensor hy = Tensor::borrow(y.data(), Shape{B, kContext}, DType::i32);
  REQUIRE_FALSE(make().ties().empty());
  for (int D : {1, 2}) {
    CAPTURE(D);
    const TrainerConfig tc = trainer_config("adamw", 1, 1.f);
    Run plain(make, tc, D, 2, 1, false);
    Run sharded(make, tc, D, 2, 1, true);
    for (int k = 0; k < kSteps; ++k) {
      const StepStats a = plain.trainer->train_step(hx, hy);
      const StepStats b = sharded.trainer->train_step(hx, hy);
      CHECK(std::memcmp(&a.grad_norm, &b.grad_norm, sizeof(double)) == 0);
      CHECK(a.loss == b.loss);
    }
    const auto want = plain.params();
    const auto got = sharded.params();
    for (const auto& p : got) CHECK(same_bits(p, want[0]));
  }
}

TEST_CASE("sharded optimizer: checkpoints are the unsharded format; resume is bit-identical") {
  const Data data(8, Shape{1, 4, 4});
  const TrainerConfig tc = trainer_config("adamw", 1, 0.05f);
  const auto dir =
      std::filesystem::temp_directory_path() / ("pt_sharded_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto path = dir / "step2";
  constexpr int kSaveAt = 2;

  // Uninterrupted: sharded and unsharded give the same bits (checked above); the reference.
  Run straight(tied_mlp, tc, 2, 2, 1, true);
  for (int k = 0; k < kSteps; ++k) straight.trainer->train_step(data.x, data.y);
  const auto want = straight.params()[0];

  {
    Run first(tied_mlp, tc, 2, 2, 1, true);
    for (int k = 0; k < kSaveAt; ++k) first.trainer->train_step(data.x, data.y);
    TrainingState st;
    st.step = kSaveAt;
    st.seed = tc.seed;
    save_checkpoint(path, first.trainer->model(), first.trainer->stages_to_save(), st);
    // Saving released nothing the next step needs: it goes on as the uninterrupted run.
    for (int k = kSaveAt; k < kSteps; ++k) first.trainer->train_step(data.x, data.y);
    CHECK(same_bits(first.params()[0], want));
  }
  const auto resume = [&](bool shard, bool hook = true) {
    Run again(tied_mlp, tc, 2, 2, 1, shard);
    const auto copies = again.trainer->all_stage_copies();
    for (const StageState& s : copies) REQUIRE(s.optimizer != nullptr);
    const TrainingState st = load_checkpoint(path, again.trainer->model(), copies);
    if (hook) again.trainer->stage_copies_loaded();
    again.trainer->set_step(st.step);
    CHECK(st.step == kSaveAt);
    for (int k = kSaveAt; k < kSteps; ++k) again.trainer->train_step(data.x, data.y);
    return again.params();
  };
  SUBCASE("into a sharded run") {
    for (const auto& p : resume(true)) CHECK(same_bits(p, want));
  }
  SUBCASE("into a sharded run, without stage_copies_loaded (the next step takes the state)") {
    for (const auto& p : resume(true, false)) CHECK(same_bits(p, want));
  }
  SUBCASE("into an unsharded run") {
    for (const auto& p : resume(false)) CHECK(same_bits(p, want));
  }
  SUBCASE("an unsharded checkpoint into a sharded run") {
    Run plain(tied_mlp, tc, 2, 2, 1, false);
    for (int k = 0; k < kSaveAt; ++k) plain.trainer->train_step(data.x, data.y);
    TrainingState st;
    st.step = kSaveAt;
    st.seed = tc.seed;
    save_checkpoint(path, plain.trainer->model(), plain.trainer->stages_to_save(), st);
    for (const auto& p : resume(true)) CHECK(same_bits(p, want));
  }
  SUBCASE("without the optimizer state the resumed run differs (the test can fail)") {
    Run again(tied_mlp, tc, 2, 2, 1, true);
    auto copies = again.trainer->all_stage_copies();
    for (StageState& s : copies) s.optimizer = nullptr;  // weights only
    load_checkpoint(path, again.trainer->model(), copies);
    again.trainer->stage_copies_loaded();
    again.trainer->set_step(kSaveAt);
    for (int k = kSaveAt; k < kSteps; ++k) again.trainer->train_step(data.x, data.y);
    CHECK_FALSE(same_bits(again.params()[0], want));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("sharded optimizer: refused without --dp >= 2") {
  TrainingOptions o;
  o.shard_optimizer = true;
  o.dp = 1;
  CHECK_THROWS_WITH_AS(o.check(8), doctest::Contains("--shard-optimizer needs --dp R >= 2"),
                       UsageError);
  o.dp = 2;
  CHECK_NOTHROW(o.check(8));
  // The library refuses it too (a program that builds the trainer itself).
  const TrainerConfig tc = trainer_config("sgd", 1, 0.f);
  CHECK_THROWS_WITH_AS(Run(tied_mlp, tc, 2, 1, 1, true),
                       doctest::Contains("--shard-optimizer needs --dp R >= 2"), UsageError);
}
