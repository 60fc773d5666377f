// --shard full (ZeRO-3 / FSDP) in one process: R replicas, each keeping 1/R of every sharded
// unit's parameters, gradients and optimizer state, gathering a unit around its compute.
// The guarantee checked: parameters and losses are the same bits as plain data parallelism with
// the same R, S and M (gradients are summed over micro-batches, then over replicas, in the same
// order; the optimizer is element-wise), with SGD+momentum (clipping active) and AdamW, every
// schedule family, recomputation, units of several layers, units kept whole after forward, and
// a tie across stages. The gradient norm is summed from the parts' partial sums of squares
// (another order): it agrees to 1e-12 relative, and clipping with it still gives the same bits
// here. A layer that ran with stale or partial weights would break the bit-identity at once:
// AdamW moves every weight every step, so a unit kept from the step before, or missing a part,
// changes the loss. Between steps the sharded units hold no memory (the layers see
// placeholders), held memory is 1/R, and a step's device peak shrinks accordingly. Hybrid
// sharding (--shard-group G) holds 1/G and trains as --dp within a stated tolerance.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <unistd.h>

#include "../engine/synthetic.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/core/error.h"
#include "engine/parallel/full_shard/unit_shards.h"
#include "engine/replicas/data_parallel_trainer.h"
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
Model plain_mlp() { return deep_mlp(4, 48, {1, 4, 4}); }

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

struct Mode {
  bool full = false;
  int unit_layers = 1;
  bool reshard_after_forward = true;
  int shard_group = 0;                   // --shard-group
  bool prefetch = true;                  // --shard-prefetch
  bool reduce_every_microbatch = false;  // --shard-reduce microbatch
};

struct Run {
  test::CpuDevices devices;
  std::unique_ptr<DataParallelTrainer> trainer;
  Run(const std::function<Model()>& make, const TrainerConfig& tc, int D, int R, int M, Mode mode,
      const std::string& schedule = "1f1b", RecomputePolicy recompute = {}, int T = 1,
      bool sequence_parallel = false)
      : devices(R * D * T) {
    PipelineConfig pc = test::pipeline_config(make(), tc, schedule, D, M);
    pc.schedule = sched::add_grad_reduction(pc.schedule);
    pc.parallel.bucket_bytes = size_t{1} << 10;
    pc.parallel.shard_full = mode.full;
    pc.parallel.shard_unit_layers = mode.unit_layers;
    pc.parallel.reshard_after_forward = mode.reshard_after_forward;
    pc.parallel.shard_group_size = mode.shard_group;
    pc.parallel.shard_prefetch = mode.prefetch;
    pc.parallel.shard_reduce_every_microbatch = mode.reduce_every_microbatch;
    pc.recompute = recompute;
    pc.parallel.sequence_parallel = sequence_parallel;
    trainer = make_local_data_parallel(make, devices.devices, pc, R, T);
  }
  // Every replica's parameters by name (gathered: a collective over the replicas).
  std::vector<std::map<std::string, std::vector<float>>> params() const {
    trainer->stage_states();
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

// Trains both runs kSteps steps on `x`, `y` and checks losses (bits), norms (1e-12) and the
// parameters of every replica of `sharded` against replica 0 of `plain` (bits).
void check_same_training(Run& plain, Run& sharded, const Tensor& x, const Tensor& y, float clip) {
  bool clipped = false;
  for (int k = 0; k < kSteps; ++k) {
    const StepStats a = plain.trainer->train_step(x, y);
    const StepStats b = sharded.trainer->train_step(x, y);
    CHECK(a.loss == b.loss);
    CHECK(std::isfinite(b.loss));
    CHECK(std::abs(a.grad_norm - b.grad_norm) <= 1e-12 * a.grad_norm);
    clipped = clipped || (clip > 0 && b.grad_norm > clip);
  }
  if (clip > 0) CHECK(clipped);  // the clipping path is exercised
  const auto want = plain.params();
  const auto got = sharded.params();
  REQUIRE(got.size() == want.size());
  for (const auto& p : got) CHECK(same_bits(p, want[0]));
}

}  // namespace

TEST_CASE("full shard: units are layers with parameters; tied layers stand alone") {
  const Model m = deep_mlp(3, 32, {1, 4, 4});  // flatten, (linear, relu) x 3, linear
  CHECK(full_shard_units(m, 0, m.num_layers(), 1) == std::vector<int>{0, 3, 5, 7});
  CHECK(full_shard_units(m, 0, m.num_layers(), 2) == std::vector<int>{0, 5});
  CHECK(full_shard_units(m, 3, m.num_layers(), 100) == std::vector<int>{3});
  const Model t = tied_mlp();  // layers 3 and 5 tied
  CHECK(full_shard_units(t, 0, t.num_layers(), 4) == std::vector<int>{0, 3, 5, 7});
  CHECK_THROWS_AS(full_shard_units(m, 0, m.num_layers(), 0), UsageError);
}

TEST_CASE("full shard: bit-identical to plain data parallelism") {
  const Data data(16, Shape{1, 4, 4});
  struct Case {
    std::string optimizer;
    float clip;
    int D, R, M;
    Mode mode;
    std::string schedule = "1f1b";
  };
  for (const Case& c :
       {Case{"sgd", 0.05f, 1, 2, 1, {true}}, Case{"sgd", 0.05f, 2, 2, 2, {true}},
        Case{"adamw", 0.f, 1, 2, 2, {true}}, Case{"adamw", 0.05f, 2, 4, 1, {true}},
        Case{"adamw", 0.f, 1, 3, 2, {true, 2}}, Case{"adamw", 0.f, 2, 2, 4, {true, 1, false}},
        Case{"adamw", 0.f, 2, 2, 4, {true}, "zb-h1"},
        Case{"adamw", 0.f, 2, 2, 4, {true}, "interleaved:2"},
        Case{"sgd", 0.f, 2, 2, 4, {true}, "dualpipev"},
        Case{"adamw", 0.05f, 2, 2, 4, {.full = true, .prefetch = false}},
        Case{"adamw", 0.f, 2, 2, 4, {.full = true, .prefetch = false}, "zb-h1"}}) {
    CAPTURE(c.optimizer);
    CAPTURE(c.clip);
    CAPTURE(c.D);
    CAPTURE(c.R);
    CAPTURE(c.M);
    CAPTURE(c.mode.unit_layers);
    CAPTURE(c.mode.reshard_after_forward);
    CAPTURE(c.schedule);
    CAPTURE(c.mode.prefetch);
    const TrainerConfig tc = trainer_config(c.optimizer, c.M, c.clip);
    Run plain(plain_mlp, tc, c.D, c.R, c.M, {}, c.schedule);
    Run sharded(plain_mlp, tc, c.D, c.R, c.M, c.mode, c.schedule);
    // Between steps the sharded units hold nothing: their layers see placeholders.
    const Model& m0 = sharded.trainer->replica(0).model();
    CHECK(m0.layer(1).params()[0].data() == nullptr);
    check_same_training(plain, sharded, data.x, data.y, c.clip);
    // Training moved the parameters (a sharded step that did nothing would fail the above too,
    // unless the plain one also did nothing).
    Run fresh(plain_mlp, tc, c.D, c.R, c.M, {}, c.schedule);
    CHECK_FALSE(same_bits(fresh.params()[0], plain.params()[0]));
  }
}

TEST_CASE("full shard: recomputation, and a tie across stages kept whole") {
  const Data data(16, Shape{1, 4, 4});
  const TrainerConfig tc = trainer_config("adamw", 2, 0.05f);
  SUBCASE("recompute always") {
    const RecomputePolicy always{RecomputePolicy::Kind::always};
    Run plain(plain_mlp, tc, 2, 2, 2, {}, "1f1b", always);
    Run sharded(plain_mlp, tc, 2, 2, 2, {true}, "1f1b", always);
    check_same_training(plain, sharded, data.x, data.y, tc.clip_norm);
  }
  SUBCASE("tied layers 3 and 5 on two stages") {
    Run plain(tied_mlp, tc, 2, 2, 2, {});
    Run sharded(tied_mlp, tc, 2, 2, 2, {true});
    check_same_training(plain, sharded, data.x, data.y, tc.clip_norm);
  }
}

// GPT's tied embeddings (tok_emb and lm_head share one weight) in different stages for S=2: the
// tied units stay whole, the transformer blocks are sharded.
TEST_CASE("full shard: tiny GPT with tied embeddings, bit-identical to plain data parallelism") {
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
    const TrainerConfig tc = trainer_config("adamw", 2, 1.f);
    Run plain(make, tc, D, 2, 2, {});
    Run sharded(make, tc, D, 2, 2, {true});
    check_same_training(plain, sharded, hx, hy, 0.f);
  }
}

// With tensor parallelism (torchtitan's FSDP + TP): each tensor rank's slices are fully sharded
// over the replicas of that rank. Compared with --tp alone, whole tensors (put together from the
// ranks) after 4 steps: the same bits, with sequence parallelism too; the norm within 1e-12
// (clipping active). Checkpoints hold whole tensors: saved fully sharded at T = 2, resumed by
// --tp 2 alone and by T = 1 fully sharded.
TEST_CASE("full shard: with tensor parallelism, bit-identical to --tp alone; checkpoints") {
  constexpr int64_t kVocab = 32, kContext = 8, B = 8;
  const auto make = [] { return gpt(kVocab, kContext, 16, 2, 2); };
  std::vector<int32_t> x(static_cast<size_t>(B * kContext)), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>((i * 11 + 3) % kVocab);
    y[i] = static_cast<int32_t>((x[i] * 5 + 1) % kVocab);
  }
  const Tensor hx = Tensor::borrow(x.data(), Shape{B, kContext}, DType::i32);
  const Tensor hy = Tensor::borrow(y.data(), Shape{B, kContext}, DType::i32);
  const TrainerConfig tc = trainer_config("adamw", 2, 1.f);
  for (const auto& item : {std::pair{1, false}, {2, false}, {2, true}}) {
    const auto& D = std::get<0>(item);
    const auto& sp = std::get<1>(item);
    CAPTURE(D);
    CAPTURE(sp);
    Run tp(make, tc, D, 2, 2, {}, "1f1b", {}, 2, sp);
    Run both(make, tc, D, 2, 2, {true}, "1f1b", {}, 2, sp);
    for (int k = 0; k < kSteps; ++k) {
      const StepStats a = tp.trainer->train_step(hx, hy);
      const StepStats b = both.trainer->train_step(hx, hy);
      CHECK(a.loss == b.loss);
      CHECK(std::isfinite(b.loss));
      CHECK(std::abs(a.grad_norm - b.grad_norm) <= 1e-12 * a.grad_norm);
    }
    const auto want = test::params_by_name(tp.trainer->stage_states());
    CHECK(same_bits(test::params_by_name(both.trainer->stage_states()), want));
  }
  // Saved at step 2 by T = 2 x R = 2 fully sharded over 2 stages, resumed two ways.
  const auto dir = std::filesystem::temp_directory_path() /
                   ("pt_full_shard_tp_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto path = dir / "step2";
  Run straight(make, tc, 2, 2, 2, {}, "1f1b", {}, 2);
  for (int k = 0; k < kSteps; ++k) straight.trainer->train_step(hx, hy);
  const auto want = test::params_by_name(straight.trainer->stage_states());
  {
    Run first(make, tc, 2, 2, 2, {true}, "1f1b", {}, 2);
    for (int k = 0; k < 2; ++k) first.trainer->train_step(hx, hy);
    TrainingState st;
    st.step = 2;
    st.seed = tc.seed;
    save_checkpoint(path, first.trainer->model(), first.trainer->stages_to_save(), st);
  }
  const auto resume = [&](Mode mode, int T) {
    Run again(make, tc, 2, 2, 2, mode, "1f1b", {}, T);
    const auto copies = again.trainer->all_stage_copies();
    for (const StageState& s : copies) REQUIRE(s.optimizer != nullptr);
    const TrainingState st = load_checkpoint(path, again.trainer->model(), copies);
    again.trainer->stage_copies_loaded();
    again.trainer->set_step(st.step);
    for (int k = 2; k < kSteps; ++k) again.trainer->train_step(hx, hy);
    return test::params_by_name(again.trainer->stage_states());
  };
  CHECK(same_bits(resume({}, 2), want));  // --tp 2 alone: the same arithmetic, the same bits
  // T = 1 adds each tensor whole instead of in slices: within a few ulps of the T = 2 run.
  const auto t1 = resume({true}, 1);
  REQUIRE(t1.size() == want.size());
  double worst = 0;
  for (const auto& [name, v] : t1)
    for (size_t i = 0; i < v.size(); ++i)
      worst = std::max(worst, static_cast<double>(std::abs(v[i] - want.at(name)[i])));
  CAPTURE(worst);
  CHECK(worst <= 1e-5);
  std::filesystem::remove_all(dir);
}

TEST_CASE("full shard: memory held is 1/R of the sharded parts; the step's peak shrinks") {
  const Data data(64, Shape{1, 4, 4});
  // Wide layers, so that parameters, gradients and optimizer state dominate activations.
  const auto make = [] { return deep_mlp(4, 256, {1, 4, 4}); };
  const TrainerConfig tc = trainer_config("adamw", 1, 0.f);
  for (const auto& item : {std::pair{2, false}, {2, true}, {4, false}, {4, true}}) {
    const auto& R = std::get<0>(item);
    const auto& prefetch = std::get<1>(item);
    CAPTURE(R);
    CAPTURE(prefetch);
    Run plain(make, tc, 1, R, 1, {});
    Run sharded(make, tc, 1, R, 1, {.full = true, .prefetch = prefetch});
    plain.trainer->train_step(data.x, data.y);
    sharded.trainer->train_step(data.x, data.y);
    const HeldBytes p = plain.trainer->replica(0).held_bytes();
    const HeldBytes s = sharded.trainer->replica(0).held_bytes();
    const size_t sharded_parts = p.parameters + p.gradients + p.optimizer;  // no tie: all of it
    const size_t held = s.parameters + s.gradients + s.optimizer;
    // Parts are padded to R equal pieces per unit: at most R - 1 floats per unit and kind.
    const size_t padding = 5 * 4 * 4 * static_cast<size_t>(R) + 5 * 4 * 64;
    CHECK(held <= sharded_parts / static_cast<size_t>(R) + padding);
    CHECK(held >= sharded_parts / static_cast<size_t>(R));
    CHECK(s.gathered_peak > 0);
    // The largest unit (256 x 256 weights and bias) whole, its gradients too; with prefetch
    // also the next unit's parameters and the gradients of the units before whose
    // reduce-scatter has not run yet (dropped at the next layer after it ran: here at most
    // two, one of them the small last layer's).
    const size_t unit = 256 * 257 * 4 + 64;
    CHECK(s.gathered_peak <= (prefetch ? 5 : 2) * unit);
    if (!prefetch) CHECK(s.gathered_peak > unit);
    // The device peak of the step: everything held, the activations, and the gathered units.
    const size_t peak_plain = plain.trainer->replica(0).last_peak_bytes()[0];
    const size_t peak_sharded = sharded.trainer->replica(0).last_peak_bytes()[0];
    CAPTURE(peak_plain);
    CAPTURE(peak_sharded);
    const size_t saved = sharded_parts - sharded_parts / static_cast<size_t>(R);
    CHECK(peak_sharded + saved <= peak_plain + s.gathered_peak + padding);
    CHECK(peak_sharded < peak_plain);
  }
}

// Hybrid sharding adds the replicas within each shard group first, then across the groups: a
// few ulps from --dp's order, so a tolerance (SGD: AdamW's first steps, ~lr * sign(g), would turn
// ulps of tiny gradients into lr-sized moves); G = R is plain full sharding, bit for bit.
TEST_CASE("full shard: hybrid sharding (--shard-group) holds 1/G, trains as data parallelism") {
  const Data data(32, Shape{1, 4, 4});
  const TrainerConfig tc = trainer_config("sgd", 2, 0.05f);
  for (int D : {1, 2}) {
    CAPTURE(D);
    Run plain(tied_mlp, tc, D, 4, 2, {});
    Run hybrid(tied_mlp, tc, D, 4, 2, {.full = true, .shard_group = 2});
    Run whole_group(tied_mlp, tc, D, 4, 2, {.full = true, .shard_group = 4});
    for (int k = 0; k < kSteps; ++k) {
      const StepStats a = plain.trainer->train_step(data.x, data.y);
      const StepStats b = hybrid.trainer->train_step(data.x, data.y);
      const StepStats c = whole_group.trainer->train_step(data.x, data.y);
      CHECK(std::abs(a.loss - b.loss) <= 1e-6 * std::abs(a.loss));
      CHECK(a.loss == c.loss);
      CHECK(std::isfinite(b.loss));
    }
    const auto want = plain.params()[0];
    const auto got = hybrid.params();
    double worst = 0;
    for (const auto& replica : got)
      for (const auto& [name, v] : replica)
        for (size_t i = 0; i < v.size(); ++i)
          worst = std::max(worst, static_cast<double>(std::abs(v[i] - want.at(name)[i])));
    CAPTURE(worst);
    CHECK(worst <= 1e-6);
    // The replicas of the two groups hold the same bits (the parts were all-reduced across them).
    for (const auto& replica : got) CHECK(same_bits(replica, got[0]));
    for (const auto& replica : whole_group.params()) CHECK(same_bits(replica, want));
    // Held: 1/G of the sharded parts (the tied units stay whole): between 1/4 and 1/2 + ties.
    const HeldBytes p = plain.trainer->replica(0).held_bytes();
    const HeldBytes h = hybrid.trainer->replica(0).held_bytes();
    const HeldBytes w = whole_group.trainer->replica(0).held_bytes();
    const size_t all = p.parameters + p.gradients + p.optimizer;
    CHECK(w.parameters + w.gradients + w.optimizer < h.parameters + h.gradients + h.optimizer);
    CHECK(h.parameters + h.gradients + h.optimizer < all);
    CHECK(h.parameters >= p.parameters / 2);
  }
  // A G that does not divide R is refused by name.
  CHECK_THROWS_WITH_AS(Run(plain_mlp, tc, 1, 4, 1, {.full = true, .shard_group = 3}),
                       doctest::Contains("--shard-group 3 does not divide --dp 4"), UsageError);
}

// --shard-reduce microbatch: each micro-batch's gradients are reduce-scattered at once and added
// in the part, so the replicas are summed before the micro-batches (--dp sums the other way
// round): within a few ulps (SGD, as above), and the whole gradients of a step's units are
// never all alive at once.
TEST_CASE("full shard: reduce-scatter every micro-batch; its gradients stay sharded") {
  const Data data(64, Shape{1, 4, 4});
  const auto make = [] { return deep_mlp(4, 64, {1, 4, 4}); };
  const TrainerConfig tc = trainer_config("sgd", 4, 0.05f);
  for (const auto& item : {std::pair{1, false}, {1, true}, {2, false}, {2, true}}) {
    const auto& D = std::get<0>(item);
    const auto& prefetch = std::get<1>(item);
    CAPTURE(D);
    CAPTURE(prefetch);
    Run plain(make, tc, D, 2, 4, {});
    Run step(make, tc, D, 2, 4, {.full = true, .prefetch = prefetch});
    Run every(make, tc, D, 2, 4,
              {.full = true, .prefetch = prefetch, .reduce_every_microbatch = true});
    for (int k = 0; k < kSteps; ++k) {
      const StepStats a = plain.trainer->train_step(data.x, data.y);
      step.trainer->train_step(data.x, data.y);
      const StepStats c = every.trainer->train_step(data.x, data.y);
      CHECK(std::abs(a.loss - c.loss) <= 1e-6 * std::abs(a.loss));
      CHECK(std::isfinite(c.loss));
    }
    const auto want = plain.params()[0];
    double worst = 0;
    for (const auto& replica : every.params())
      for (const auto& [name, v] : replica)
        for (size_t i = 0; i < v.size(); ++i)
          worst = std::max(worst, static_cast<double>(std::abs(v[i] - want.at(name)[i])));
    CAPTURE(worst);
    CHECK(worst <= 1e-6);
    // Per step, every unit's whole gradient is alive from its first micro-batch to the last;
    // per micro-batch, one or two units' at a time.
    const size_t per_step = step.trainer->replica(0).held_bytes().gathered_peak;
    const size_t per_microbatch = every.trainer->replica(0).held_bytes().gathered_peak;
    CAPTURE(per_step);
    CAPTURE(per_microbatch);
    CHECK(per_microbatch < per_step);
  }
}

// A NaN in one replica's rows makes that replica's parts of the gradient NaN; the norm, summed
// from every replica's parts, is NaN on all of them, so every replica skips, as --dp does.
TEST_CASE("full shard: a non-finite gradient skips the step on every replica, as --dp does") {
  const Data good(16, Shape{1, 4, 4});
  Data bad(16, Shape{1, 4, 4});
  bad.set.inputs[5] = std::numeric_limits<float>::quiet_NaN();  // replica 0's first micro-batch
  const TrainerConfig tc = trainer_config("sgd", 2, 0.05f);
  for (int D : {1, 2}) {
    CAPTURE(D);
    Run plain(tied_mlp, tc, D, 2, 2, {});
    Run sharded(tied_mlp, tc, D, 2, 2, {.full = true, .reduce_every_microbatch = D == 1});
    plain.trainer->train_step(good.x, good.y);
    sharded.trainer->train_step(good.x, good.y);
    const auto before = sharded.params();
    const StepStats a = plain.trainer->train_step(bad.x, bad.y);
    const StepStats b = sharded.trainer->train_step(bad.x, bad.y);
    CHECK(a.skipped);
    CHECK(b.skipped);
    for (const auto& replica : sharded.params()) CHECK(same_bits(replica, before[0]));
    // Training goes on from there, as --dp's does (per micro-batch reduction: within 1e-6).
    for (int k = 0; k < 2; ++k) {
      plain.trainer->train_step(good.x, good.y);
      sharded.trainer->train_step(good.x, good.y);
    }
    const auto want = plain.params()[0];
    double worst = 0;
    for (const auto& replica : sharded.params())
      for (const auto& [name, v] : replica)
        for (size_t i = 0; i < v.size(); ++i)
          worst = std::max(worst, static_cast<double>(std::abs(v[i] - want.at(name)[i])));
    CAPTURE(worst);
    CHECK(std::isfinite(worst));
    CHECK(worst <= (D == 1 ? 1e-6 : 0.0));
  }
}

TEST_CASE("full shard: checkpoints are the unsharded format; resume is bit-identical") {
  const Data data(8, Shape{1, 4, 4});
  const TrainerConfig tc = trainer_config("adamw", 1, 0.05f);
  const auto dir =
      std::filesystem::temp_directory_path() / ("pt_full_shard_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto path = dir / "step2";
  constexpr int kSaveAt = 2;

  Run straight(tied_mlp, tc, 2, 2, 1, {true});
  for (int k = 0; k < kSteps; ++k) straight.trainer->train_step(data.x, data.y);
  const auto want = straight.params()[0];

  const auto save = [&](Mode mode) {
    Run first(tied_mlp, tc, 2, 2, 1, mode);
    for (int k = 0; k < kSaveAt; ++k) first.trainer->train_step(data.x, data.y);
    TrainingState st;
    st.step = kSaveAt;
    st.seed = tc.seed;
    save_checkpoint(path, first.trainer->model(), first.trainer->stages_to_save(), st);
    // Saving released nothing the next step needs: it goes on as the uninterrupted run.
    for (int k = kSaveAt; k < kSteps; ++k) first.trainer->train_step(data.x, data.y);
    CHECK(same_bits(first.params()[0], want));
  };
  const auto resume = [&](Mode mode, bool hook = true) {
    Run again(tied_mlp, tc, 2, 2, 1, mode);
    const auto copies = again.trainer->all_stage_copies();
    for (const StageState& s : copies) REQUIRE(s.optimizer != nullptr);
    const TrainingState st = load_checkpoint(path, again.trainer->model(), copies);
    if (hook) again.trainer->stage_copies_loaded();
    again.trainer->set_step(st.step);
    CHECK(st.step == kSaveAt);
    for (int k = kSaveAt; k < kSteps; ++k) again.trainer->train_step(data.x, data.y);
    return again.params();
  };
  SUBCASE("into a fully sharded run") {
    save({true});
    for (const auto& p : resume({true})) CHECK(same_bits(p, want));
  }
  SUBCASE("into a fully sharded run with other units, without stage_copies_loaded") {
    save({true});
    for (const auto& p : resume({true, 3, false}, false)) CHECK(same_bits(p, want));
  }
  SUBCASE("into a plain data-parallel run") {
    save({true});
    for (const auto& p : resume({})) CHECK(same_bits(p, want));
  }
  SUBCASE("a plain checkpoint into a fully sharded run") {
    save({});
    for (const auto& p : resume({true})) CHECK(same_bits(p, want));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("full shard: what it cannot be combined with is refused by name") {
  TrainingOptions o;
  o.shard_full = true;
  const auto refused = [&](const TrainingOptions& opt, const char* words) {
    try {
      opt.check(64);
    } catch (const UsageError& e) {
      CAPTURE(e.what());
      CHECK(std::string(e.what()).find(words) != std::string::npos);
      return;
    }
    FAIL("not refused: " << words);
  };
  refused(o, "--shard full needs --dp R >= 2");
  o.dp = 2;
  CHECK_NOTHROW(o.check(64));
  TrainingOptions zero1 = o;
  zero1.shard_optimizer = true;
  refused(zero1, "--shard full with --shard-optimizer");
  TrainingOptions ps = o;
  ps.ps = 1;
  refused(ps, "--shard full with --ps");
  TrainingOptions async = o;
  async.async_update = true;
  async.stages = 2;
  async.microbatches = 2;
  refused(async, "--shard full with --update async");
  TrainingOptions unit = o;
  unit.shard_unit = 0;
  refused(unit, "--shard-unit");
  TrainingOptions group = o;
  group.dp = 6;
  group.shard_group = 4;
  refused(group, "--shard-group 4 does not divide --dp 6");
  // The runtime refuses it too, before anything runs, for a caller that skips the options.
  const TrainerConfig tc = trainer_config("sgd", 1, 0.f);
  CHECK_THROWS_WITH_AS(Run(plain_mlp, tc, 1, 1, 1, {true}), doctest::Contains("--dp R >= 2"),
                       UsageError);
}
