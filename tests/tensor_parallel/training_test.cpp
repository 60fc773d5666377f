// Training with tensor parallelism in one process, against single-device training: the mesh
// R x S x T (data-parallel replicas, pipeline stages, tensor ranks) as threads on virtual CPU
// devices, the MLP (hidden linears in column/row pairs) and a small GPT (heads split, vocab-
// parallel embedding, LM head and loss, tied weights), every schedule family, 20 steps of SGD
// with momentum and global-norm clipping (the norm completed across tensor ranks).
//
// Tolerance: the split changes the order of sums (row-parallel outputs and column-parallel input
// gradients are T partial sums added; the norm adds the squares of slices), so results are not
// bit-identical; single rounding differences (~1e-7 relative) grow over 20 steps. The worst
// measured over the layouts below: losses 1.7e-8 relative, parameters 1.2e-7 absolute (on
// values of order 0.1); with sequence parallelism (whose LayerNorm gradients are summed per
// chunk, then over the ranks) 1.7e-8 and 1.2e-7 at T' = 8, 5.4e-8 and 1.2e-7 at T' = 4 (the
// context is 8); the bounds are ~4-10x that, and a real error (a slice of the wrong rows,
// a sum skipped, replicated parameters diverging, the norm counted T times) moves them by more
// than 1e-3 in the first steps. Each copy must also hold only its slices (fewer parameters than
// the model), so a split that did nothing could not pass.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/core/random.h"
#include "engine/replicas/data_parallel_trainer.h"
#include "engine/report/compare.h"
#include "engine/train/trainer.h"
#include "layers/tensor_parallel/param_slices.h"
#include "layers/zoo.h"
#include "tests/engine/temp_dir.h"
#include "tests/pipeline/pipeline_test_util.h"

using namespace pt;
using namespace pt::test;

namespace {

constexpr int kSteps = 20;
constexpr double kLossTolerance = 2e-7;   // relative; measured worst 1.7e-8
constexpr double kParamTolerance = 1e-6;  // absolute; measured worst 1.2e-7

TrainerConfig trainer_config(int microbatches) {
  TrainerConfig c;
  c.microbatches = microbatches;
  c.seed = 5;
  c.optimizer.kind = "sgd";
  c.optimizer.lr = 0.05f;
  c.optimizer.momentum = 0.9f;
  c.lr = {LrSchedule::Kind::constant, 0.05f, 0, 0, 0.f};
  c.clip_norm = 0.5f;  // binding in the first steps: the norm must be the whole model's
  return c;
}

struct TokenBatch {
  std::vector<float> xf;
  std::vector<int32_t> xi, y;
  Tensor x, t;
};

// Token ids and next-token targets for a GPT of `vocab` and `context`.
TokenBatch token_batch(int64_t batch, int64_t context, int64_t vocab) {
  TokenBatch b;
  CounterRng rng(99);
  for (int64_t i = 0; i < batch * context; ++i) {
    b.xi.push_back(static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(vocab))));
    b.y.push_back(static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(vocab))));
  }
  b.x = Tensor::borrow(b.xi.data(), Shape{batch, context}, DType::i32);
  b.t = Tensor::borrow(b.y.data(), Shape{batch, context}, DType::i32);
  return b;
}

struct Run {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;  // whole, by checkpoint name
};

Run reference(const std::function<Model()>& make, const Tensor& x, const Tensor& y, int M) {
  auto backend = make_cpu_backend(0, 1);
  Model m = make();
  Trainer t(m, *backend, trainer_config(M));
  Run out;
  for (int k = 0; k < kSteps; ++k) out.losses.push_back(t.train_step(x, y).loss);
  out.params = params_by_name(t.stage_states());
  return out;
}

// Replica 0's parameters, put together from its T copies' slices; a replicated parameter must
// be the same bits on every copy.
std::map<std::string, std::vector<float>> whole_params(DataParallelTrainer& trainer, int T,
                                                       int64_t whole_count) {
  std::map<std::string, std::vector<float>> whole;
  for (int t = 0; t < T; ++t) {
    PipelineTrainer& copy = trainer.replica(t);
    CHECK(copy.model().param_count() < whole_count);  // it holds slices, not the whole model
    for (const StageState& s : copy.stage_states())
      for (size_t i = 0; i < s.params->entries().size(); ++i) {
        const ParameterEntry& e = s.params->entries()[i];
        const ParamSpec spec = copy.model().layer(e.layer).param_specs()[e.param_index];
        const Tensor p = s.params->param(i);
        const std::vector<float> slice(p.f32(), p.f32() + p.numel());
        if (!spec.shard.split()) {
          if (t == 0)
            whole[e.name] = slice;
          else
            CHECK_MESSAGE(whole[e.name] == slice, e.name, " differs on tensor rank ", t);
          continue;
        }
        auto& w = whole[e.name];
        w.resize(static_cast<size_t>(spec.shard.whole.numel()));
        put_slice(slice, spec.shard, w);
      }
  }
  return whole;
}

Run tensor_parallel(const std::function<Model()>& make, const Tensor& x, const Tensor& y,
                    const std::string& schedule, int R, int D, int T, int M,
                    bool sequence_parallel = false, RecomputePolicy recompute = {},
                    bool overlap = true, bool forwards_take_turns = true) {
  CpuDevices devices(R * D * T);
  Model shape_model = make();
  PipelineConfig pc = pipeline_config(shape_model, trainer_config(M), schedule, D, M);
  pc.schedule = sched::add_grad_reduction(pc.schedule);
  pc.parallel.sequence_parallel = sequence_parallel;
  pc.parallel.tensor_parallel_overlap = overlap;
  pc.parallel.tensor_parallel_overlap_forwards = forwards_take_turns;
  pc.recompute = recompute;
  auto trainer = make_local_data_parallel(make, devices.devices, pc, R, T);
  Run out;
  for (int k = 0; k < kSteps; ++k) out.losses.push_back(trainer->train_step(x, y).loss);
  out.params = whole_params(*trainer, T, shape_model.param_count());
  return out;
}

void compare(const Run& got, const Run& want) {
  REQUIRE(got.losses.size() == want.losses.size());
  double worst_loss = 0, worst_param = 0;
  for (size_t k = 0; k < got.losses.size(); ++k) {
    REQUIRE(std::isfinite(got.losses[k]));
    worst_loss = std::max(worst_loss, std::abs(got.losses[k] - want.losses[k]) /
                                          std::max(1e-12, std::abs(want.losses[k])));
  }
  REQUIRE(got.params.size() == want.params.size());
  for (const auto& item : want.params) {
    const auto& name = std::get<0>(item);
    const auto& values = std::get<1>(item);
    auto it = got.params.find(name);
    REQUIRE_MESSAGE(it != got.params.end(), name);
    worst_param = std::max(worst_param, compare_tensors(it->second, values).max_abs);
  }
  INFO("worst loss difference (relative) ", worst_loss, ", worst parameter difference ",
       worst_param);
  CHECK(worst_loss <= kLossTolerance);
  CHECK(worst_param <= kParamTolerance);
  // Training moved: a run that changed nothing would not be a test.
  CHECK(want.losses.back() < want.losses.front());
}

struct Layout {
  int R, D, T;
  const char* schedule;
  int M;
  bool sp = false;  // sequence parallelism (tests/tensor_parallel/sequence_parallel_test.cpp)
};

}  // namespace

TEST_CASE("MLP: R x S x T in one process equals single-device training (20 steps)") {
  const auto make = [] { return deep_mlp(4, 32, Shape{2, 4, 4}); };
  const SyntheticBatch data(24, Shape{2, 4, 4});
  for (const Layout& l :
       {Layout{1, 1, 2, "gpipe", 1}, Layout{1, 1, 4, "gpipe", 2}, Layout{1, 2, 2, "1f1b", 3},
        Layout{1, 2, 2, "zb-h1", 3}, Layout{1, 2, 2, "interleaved:2", 2}, Layout{1, 2, 2, "zbv", 4},
        Layout{2, 2, 2, "1f1b", 2}}) {
    INFO("schedule ", l.schedule, " R ", l.R, " S ", l.D, " T ", l.T);
    compare(tensor_parallel(make, data.x, data.y, l.schedule, l.R, l.D, l.T, l.M),
            reference(make, data.x, data.y, l.R * l.M));
  }
}

TEST_CASE("GPT: heads, MLP and vocabulary split, tied embedding and head, every schedule family") {
  // 2 blocks: tok_emb, pos_emb, block0, block1, ln_f, lm_head (tied to tok_emb across stages).
  // With sequence parallelism (sp) the blocks and ln_f run on chunks of the sequence and the
  // stages send chunks; context 8 and, below, sequences of T' = 4 < context.
  const auto make = [] { return gpt(/*vocab=*/64, /*context=*/8, /*d_model=*/32, 2, 4); };
  for (const int64_t Tp : {8, 4}) {
    const TokenBatch b = token_batch(8, Tp, 64);
    for (const Layout& l :
         {Layout{1, 1, 2, "gpipe", 1}, Layout{1, 2, 2, "1f1b", 2}, Layout{1, 2, 2, "zb-h1", 2},
          Layout{1, 2, 4, "gpipe", 2}, Layout{1, 2, 2, "v-half", 4}, Layout{2, 2, 2, "1f1b", 2},
          Layout{1, 1, 2, "gpipe", 1, true}, Layout{1, 1, 4, "1f1b", 2, true},
          Layout{1, 2, 2, "1f1b", 2, true}, Layout{1, 2, 2, "zb-h1", 2, true},
          Layout{1, 2, 4, "gpipe", 2, true}, Layout{1, 2, 2, "v-half", 4, true},
          Layout{2, 2, 2, "1f1b", 2, true}}) {
      if (Tp != 8 && !l.sp) continue;  // shorter sequences: the sequence-parallel layouts
      INFO("schedule ", l.schedule, " R ", l.R, " S ", l.D, " T ", l.T, " sequence parallel ", l.sp,
           " T' ", Tp);
      compare(tensor_parallel(make, b.x, b.t, l.schedule, l.R, l.D, l.T, l.M, l.sp),
              reference(make, b.x, b.t, l.R * l.M));
    }
  }
}

namespace {

// A run of `steps` steps at R x S x T, optionally resumed from / saved to a checkpoint; its
// losses and whole parameters (and optimizer state, through a last save) after.
struct Resumable {
  std::function<Model()> make;
  const Tensor *x, *y;
  int M = 2;

  Run run(int R, int D, int T, int steps, const std::string& resume, const std::string& save,
          const std::string& schedule = "1f1b") const {
    CpuDevices devices(R * D * T);
    Model shape_model = make();
    PipelineConfig pc = pipeline_config(shape_model, trainer_config(M), schedule, D, M);
    pc.schedule = sched::add_grad_reduction(pc.schedule);
    auto trainer = make_local_data_parallel(make, devices.devices, pc, R, T);
    int64_t step = 0;
    if (!resume.empty()) {
      const TrainingState s =
          load_checkpoint(resume, trainer->model(), trainer->all_stage_copies());
      trainer->stage_copies_loaded();
      trainer->set_step(s.step);
      step = s.step;
    }
    Run out;
    for (int k = 0; k < steps; ++k) out.losses.push_back(trainer->train_step(*x, *y).loss);
    TrainingState state;
    state.step = step + steps;
    state.seed = trainer->seed();
    if (!save.empty()) save_checkpoint(save, trainer->model(), trainer->stages_to_save(), state);
    // The whole parameters and optimizer state, as the checkpoint writer sees them.
    for (const StageState& st : trainer->stages_to_save())
      for (size_t i = 0; i < st.params->entries().size(); ++i) {
        const Tensor p = st.params->param(i);
        out.params[st.params->entries()[i].name].assign(p.f32(), p.f32() + p.numel());
        for (const OptimizerSlot& slot : st.optimizer->slots()) {
          const Tensor v = slot.state.view(st.params->entries()[i].table_index);
          out.params["optimizer." + st.params->entries()[i].name + "." + slot.name].assign(
              v.f32(), v.f32() + v.numel());
        }
      }
    return out;
  }
};

}  // namespace

TEST_CASE("checkpoints hold whole tensors: saved at T = 2, resumed at T = 2, 1 and 4") {
  const TokenBatch b = token_batch(8, 8, 64);
  const Resumable gpt_run{[] { return gpt(64, 8, 32, 2, 4); }, &b.x, &b.t};
  TempDir dir("pipetrain-tp-ckpt");
  const std::string at10 = dir.path / "at10";
  gpt_run.run(1, 2, 2, 10, "", at10);
  const Run straight = gpt_run.run(1, 2, 2, 20, "", "");
  // The same layout resumes bit for bit: the slices cut from the whole tensors are the ones
  // saved, optimizer state included.
  const Run same = gpt_run.run(1, 2, 2, 10, at10, "");
  CHECK(same.params == straight.params);
  CHECK(std::vector<double>(straight.losses.begin() + 10, straight.losses.end()) == same.losses);
  // Another T (and S, R) continues the same trajectory within the tolerance of a changed order.
  for (const auto& item : {std::tuple{1, 2, 1}, std::tuple{1, 1, 4}, std::tuple{2, 1, 2}}) {
    const auto& R = std::get<0>(item);
    const auto& D = std::get<1>(item);
    const auto& T = std::get<2>(item);
    CAPTURE(R);
    CAPTURE(D);
    CAPTURE(T);
    Run other = gpt_run.run(R, D, T, 10, at10, "");
    Run tail = straight;
    tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 10);
    compare(other, tail);
  }
}

TEST_CASE("the rest of the menu: recomputation, uneven micro-batches, more schedules") {
  const RecomputePolicy always{RecomputePolicy::Kind::always, 0};
  // The MLP: 23 samples in 3 micro-batches (8, 8, 7), recomputing every forward.
  const auto mlp = [] { return deep_mlp(4, 32, Shape{2, 4, 4}); };
  const SyntheticBatch uneven(23, Shape{2, 4, 4});
  compare(tensor_parallel(mlp, uneven.x, uneven.y, "1f1b", 1, 2, 2, 3, false, always),
          reference(mlp, uneven.x, uneven.y, 3));
  const SyntheticBatch data(24, Shape{2, 4, 4});
  for (const char* schedule : {"zb-h2", "dualpipev", "v-min"}) {
    INFO("schedule ", schedule);
    compare(tensor_parallel(mlp, data.x, data.y, schedule, 1, 2, 2, 4),
            reference(mlp, data.x, data.y, 4));
  }
  // The GPT with sequence parallelism, recomputing every forward under zero-bubble's split
  // backward (the recomputed forward repeats its collectives on every rank alike).
  const auto gpt_model = [] { return gpt(64, 8, 32, 2, 4); };
  const TokenBatch b = token_batch(8, 8, 64);
  compare(tensor_parallel(gpt_model, b.x, b.t, "zb-h1", 1, 2, 2, 2, true, always),
          reference(gpt_model, b.x, b.t, 2));
}

TEST_CASE("a non-finite gradient skips the step on every tensor rank, as on one device") {
  const auto make = [] { return deep_mlp(2, 16, Shape{2, 4, 4}); };
  SyntheticBatch bad(8, Shape{2, 4, 4});
  bad.set.inputs[5] = std::numeric_limits<float>::quiet_NaN();
  const SyntheticBatch good(8, Shape{2, 4, 4});
  CpuDevices devices(2);
  Model shape_model = make();
  PipelineConfig pc = pipeline_config(shape_model, trainer_config(1), "gpipe", 1, 1);
  auto trainer = make_local_data_parallel(make, devices.devices, pc, 1, 2);
  trainer->train_step(good.x, good.y);
  const auto before = whole_params(*trainer, 2, shape_model.param_count());
  const StepStats s = trainer->train_step(bad.x, bad.y);
  CHECK(s.skipped);
  CHECK(whole_params(*trainer, 2, shape_model.param_count()) == before);
  // Training goes on from there, as one device's does.
  auto backend = make_cpu_backend(0, 1);
  Model m = make();
  Trainer one(m, *backend, trainer_config(1));
  one.train_step(good.x, good.y);
  CHECK(one.train_step(bad.x, bad.y).skipped);
  Run got, want;
  for (int k = 0; k < 3; ++k) {
    got.losses.push_back(trainer->train_step(good.x, good.y).loss);
    want.losses.push_back(one.train_step(good.x, good.y).loss);
  }
  got.params = whole_params(*trainer, 2, shape_model.param_count());
  want.params = params_by_name(one.stage_states());
  compare(got, want);
}

TEST_CASE("overlapped collectives change no bit: --tp-overlap on and off, a split backward") {
  // The overlap moves when a collective runs, not what it sums: on and off give the same bits;
  // and zb-h1's split backward (backward_input, later backward_weight, nothing overlapped)
  // gives the bits of 1f1b's overlapped Layer::backward (one stage: the same micro-batch order).
  const auto gpt_model = [] { return gpt(64, 8, 32, 2, 4); };
  const TokenBatch b = token_batch(8, 8, 64);
  for (const bool sp : {false, true}) {
    CAPTURE(sp);
    const Run on = tensor_parallel(gpt_model, b.x, b.t, "1f1b", 1, 1, 2, 2, sp, {}, true);
    const Run off = tensor_parallel(gpt_model, b.x, b.t, "1f1b", 1, 1, 2, 2, sp, {}, false);
    const Run split = tensor_parallel(gpt_model, b.x, b.t, "zb-h1", 1, 1, 2, 2, sp, {}, true);
    CHECK(on.losses == off.losses);
    CHECK(on.params == off.params);
    CHECK(split.losses == on.losses);
    CHECK(split.params == on.params);
    compare(on, reference(gpt_model, b.x, b.t, 2));  // and it trains
  }
}

TEST_CASE("forwards taking turns change no bit: gpipe, --tp-overlap on, backward and off") {
  // gpipe's adjacent forwards take turns at their collectives (paired_forwards_test.cpp says
  // which): on one stage every pair, on two the first stage's (across its SEND_F). What runs
  // between a collective's start and its wait is the other micro-batch's work, so nothing a
  // micro-batch computes changes, nor the order of the loss shares.
  const auto gpt_model = [] { return gpt(64, 8, 32, 2, 4); };
  const TokenBatch b = token_batch(8, 8, 64);
  for (const int D : {1, 2})
    for (const bool sp : {false, true}) {
      CAPTURE(D);
      CAPTURE(sp);
      const Run on = tensor_parallel(gpt_model, b.x, b.t, "gpipe", 1, D, 2, 4, sp, {}, true, true);
      const Run backward =
          tensor_parallel(gpt_model, b.x, b.t, "gpipe", 1, D, 2, 4, sp, {}, true, false);
      const Run off =
          tensor_parallel(gpt_model, b.x, b.t, "gpipe", 1, D, 2, 4, sp, {}, false, false);
      CHECK(on.losses == backward.losses);
      CHECK(on.params == backward.params);
      CHECK(on.losses == off.losses);
      CHECK(on.params == off.params);
      if (D == 1 && !sp) compare(on, reference(gpt_model, b.x, b.t, 4));  // and it trains
    }
}
