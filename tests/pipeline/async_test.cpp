// --update async (PipeDream-2BW): the pipeline against a single-device reference of the delayed
// update written here in a few lines — step t's gradient g_t taken at W(t - 1) by a Trainer whose
// weights are set to W(t - 1), then W(t + 1) = W(t) - lr * update(g_t) by an Optimizer — bit for
// bit on the CPU; with --async-delay per-stage the reference takes g_t with the last stage's
// layers at W(t) instead, with per-microbatch micro-batch by micro-batch with each stage's
// layers at the version the lists allow; every backward runs with its forward's weight
// version; the refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <tuple>

#include "../engine/synthetic.h"
#include "../engine/temp_dir.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/core/error.h"
#include "engine/replicas/data_parallel_trainer.h"
#include "engine/report/compare.h"
#include "engine/train/forward_pass.h"
#include "engine/train/trainer.h"
#include "engine/update/weight_versions.h"
#include "layers/builder.h"
#include "layers/zoo.h"
#include "tests/pipeline/pipeline_test_util.h"

using namespace pt;

namespace {

constexpr int kSteps = 7;  // windows of 3: 3 + 3 + 1 (a short last window too)
constexpr int64_t kBatch = 12;

Model dropout_mlp() {
  ModelBuilder b(Shape{1, 6, 6});
  b.flatten().linear(32).relu().dropout(0.3f).linear(32).relu().linear(24).relu();
  return b.linear(10).cross_entropy().build();
}

TrainerConfig trainer_config(const std::string& optimizer) {
  TrainerConfig c;
  c.microbatches = 4;
  c.seed = 11;
  c.optimizer.kind = optimizer;
  c.optimizer.lr = optimizer == "sgd" ? 0.05f : 0.01f;
  c.optimizer.momentum = 0.9f;
  c.optimizer.weight_decay = 0.01f;
  c.lr = {LrSchedule::Kind::constant, c.optimizer.lr, 0, 0, 0.f};
  return c;
}

std::vector<float> host(const Tensor& t) { return {t.f32(), t.f32() + t.numel()}; }

struct Data {
  Dataset d = test::synthetic_dataset(kSteps * kBatch, Shape{1, 6, 6}, 10, 3);
  HostBatch batch(int t) {
    const int64_t k = d.sample_shape.numel();
    return {Tensor::borrow(d.inputs.data() + t * kBatch * k, Shape{kBatch, 1, 6, 6}),
            Tensor::borrow(d.labels.data() + t * kBatch, Shape{kBatch}, DType::i32)};
  }
};

struct Result {
  std::vector<double> losses;
  std::vector<float> params;  // W(kSteps), all layers in global order
};

// The layers of the last of S stages as test::pipeline_config splits them: [first, layers).
int last_stage_first_layer(const Model& m, int S) {
  const auto sizes = split_sizes(m.num_layers(), S);
  return static_cast<int>(m.num_layers() - sizes.back());
}

// The delayed update on one device: `grad` computes g_t at W(t - 1) (its own optimizer's step is
// overwritten before it matters), `weights` holds W(t) and steps with g_t. With `last_fresh_of`
// = S (AsyncDelay::per_stage over S stages) the last stage's layers of `grad` hold W(t) instead.
// `microbatches`: R * M for R replicas of M micro-batches each.
Result reference(const std::string& optimizer, Data& data, int microbatches = 4,
                 int last_fresh_of = 0) {
  auto backend = make_cpu_backend(0, 1);
  Model gm = dropout_mlp(), wm = dropout_mlp();
  TrainerConfig gc = trainer_config("sgd");
  gc.microbatches = microbatches;
  gc.optimizer.momentum = 0.f;
  gc.optimizer.weight_decay = 0.f;
  Trainer grad(gm, *backend, gc);
  const TrainerConfig wc = trainer_config(optimizer);
  StageParameters weights(wm, 0, wm.num_layers(), *backend, wc.seed);
  Optimizer opt(wc.optimizer, *backend, weights.layout());
  // The last stage's parameters: the end of the arena, whose order is the layers' (global order).
  const size_t fresh =
      last_fresh_of
          ? static_cast<size_t>(StageParameters(wm, last_stage_first_layer(wm, last_fresh_of),
                                                wm.num_layers(), *backend, wc.seed)
                                    .params_flat()
                                    .numel())
          : 0;
  Result r;
  for (int t = 0; t < kSteps; ++t) {
    const HostBatch b = data.batch(t);
    r.losses.push_back(grad.train_step(b.inputs, b.targets).loss);  // at W(t - 1)
    const std::vector<float> latest = host(weights.params_flat());  // W(t)
    opt.step(weights.params_flat(), grad.parameters().grads_flat(), wc.lr.at(t));
    std::memcpy(grad.parameters().params_flat().f32(), latest.data(),
                latest.size() * sizeof(float));  // the next step's W(t)
    const size_t from = latest.size() - fresh;   // per-stage: the last stage's W(t + 1)
    std::memcpy(grad.parameters().params_flat().f32() + from, weights.params_flat().f32() + from,
                fresh * sizeof(float));
  }
  r.params = host(weights.params_flat());
  return r;
}

PipelineConfig async_config(const Model& m, const std::string& optimizer, int S,
                            AsyncDelay delay = AsyncDelay::uniform) {
  PipelineConfig pc = test::pipeline_config(m, trainer_config(optimizer), "1f1b", S, 4);
  pc.async_update = true;
  pc.async_window = 3;
  pc.async_delay = delay;
  return pc;
}

Result pipelined(const std::string& optimizer, int S, Data& data,
                 std::vector<std::vector<VersionUse>>* uses = nullptr,
                 AsyncDelay delay = AsyncDelay::uniform) {
  test::CpuDevices devices(S);
  Model m = dropout_mlp();
  PipelineTrainer p(m, devices.devices, async_config(m, optimizer, S, delay));
  CHECK(p.window() == 3);
  Result r;
  std::vector<HostBatch> batches;
  for (int t = 0; t < kSteps; ++t) batches.push_back(data.batch(t));
  // Two calls: windows 3 + 1 (train_steps cuts at the window), then 3.
  for (const auto& [first, n] : {std::pair{0, 4}, std::pair{4, 3}}) {
    for (const StepStats& st :
         p.train_steps(std::span(batches).subspan(static_cast<size_t>(first), n))) {
      r.losses.push_back(st.loss);
      CHECK(std::isfinite(st.grad_norm));
    }
    if (uses)
      for (size_t s = 0; s < p.last_version_uses().size(); ++s)
        (*uses)[s].insert((*uses)[s].end(), p.last_version_uses()[s].begin(),
                          p.last_version_uses()[s].end());
  }
  CHECK(p.step() == kSteps);
  // A second version of every stage's weights, or (per-stage) of all but the last.
  size_t stash = 0;
  for (int s = 0; s < S; ++s)
    if (delay == AsyncDelay::uniform || s < S - 1)
      stash += p.stage_parameters(s).params_flat().bytes();
  CHECK(p.weight_stash_bytes() == stash);
  CHECK(p.stage_parameters(S - 1).has_stash() == (delay == AsyncDelay::uniform));
  for (int s = 0; s < S; ++s) {
    const auto v = host(p.stage_parameters(s).params_flat());
    r.params.insert(r.params.end(), v.begin(), v.end());
  }
  return r;
}

// --dp R in one process: R replicas of S stages, M micro-batches each, the same 7 steps in
// windows of 3. `params[r]`: replica r's W(kSteps) then its stash W(kSteps - 1), global order.
struct DpResult {
  std::vector<double> losses;
  std::vector<std::vector<float>> params, stash;
};

DpResult data_parallel(const std::string& optimizer, int S, int R, int M, Data& data,
                       AsyncDelay delay = AsyncDelay::uniform) {
  test::CpuDevices devices(R * S);
  TrainerConfig c = trainer_config(optimizer);
  c.microbatches = M;
  PipelineConfig pc = test::pipeline_config(dropout_mlp(), c, "1f1b", S, M);
  pc.async_update = true;
  pc.async_window = 3;
  pc.async_delay = delay;
  auto dp = make_local_data_parallel(dropout_mlp, devices.devices, pc, R);
  REQUIRE(dp->window() == 3);
  std::vector<HostBatch> batches;
  for (int t = 0; t < kSteps; ++t) batches.push_back(data.batch(t));
  DpResult out;
  for (const StepStats& st : dp->train_steps(batches)) {
    out.losses.push_back(st.loss);
    CHECK(std::isfinite(st.grad_norm));
  }
  CHECK(dp->step() == kSteps);
  for (int r = 0; r < R; ++r) {
    std::vector<float> p, w;
    for (const StageState& s : dp->replica(r).stage_states()) {
      const auto v = host(s.params->params_flat());
      const auto x = s.params->has_stash() ? host(s.params->stash_flat()) : std::vector<float>{};
      p.insert(p.end(), v.begin(), v.end());
      w.insert(w.end(), x.begin(), x.end());
    }
    out.params.push_back(std::move(p));
    out.stash.push_back(std::move(w));
  }
  return out;
}

// A checkpoint of `engine` at its current step.
void save(const std::filesystem::path& path, const Model& m, TrainingEngine& engine) {
  TrainingState state;
  state.step = engine.step();
  state.seed = engine.seed();
  const std::vector<StageState> stages = engine.stage_states();
  save_checkpoint(path, m, stages, state);
}

// --async-delay per-microbatch over S stages: micro-batch m of step t computes with W(t - 1) on
// the stages s < S - 1 - m (it starts there before their UPDATE of step t - 1) and with W(t) on
// the others. The gradient is accumulated micro-batch by micro-batch as Trainer::train_step
// does, each stage's slice of the weights set before each micro-batch. `microbatches`: R * M
// for R replicas of `per_replica` = M each (m: the index within its replica's M).
Result reference_per_microbatch(const std::string& optimizer, Data& data, int S,
                                int microbatches = 4, int per_replica = 4) {
  auto backend = make_cpu_backend(0, 1);
  Model gm = dropout_mlp(), wm = dropout_mlp();
  const int L = gm.num_layers(), M = microbatches;
  TrainerConfig gc = trainer_config("sgd");
  Trainer grad(gm, *backend, gc);  // its parameters and contexts; its step is not used
  const TrainerConfig wc = trainer_config(optimizer);
  StageParameters weights(wm, 0, L, *backend, wc.seed);
  Optimizer opt(wc.optimizer, *backend, weights.layout());
  // Stage s's weights: [offset[s], offset[s + 1]) of the arena (the layers' global order).
  std::vector<size_t> offset{0};
  int first_layer = 0;
  for (const int64_t n : split_sizes(L, S)) {
    const int last = first_layer + static_cast<int>(n);
    offset.push_back(
        offset.back() +
        static_cast<size_t>(
            StageParameters(wm, first_layer, last, *backend, wc.seed).params_flat().numel()));
    first_layer = last;
  }
  StageParameters& gp = grad.parameters();
  std::vector<float> previous = host(weights.params_flat());  // W(-1) = W(0)
  Result r;
  for (int t = 0; t < kSteps; ++t) {
    const HostBatch b = data.batch(t);
    const std::vector<float> latest = host(weights.params_flat());  // W(t)
    const auto sizes = split_sizes(kBatch, M);
    gp.start_gradients();
    double loss = 0;
    int64_t first = 0;
    for (int m = 0; m < M; ++m) {
      for (int st = 0; st < S; ++st) {
        const std::vector<float>& v = m % per_replica < S - 1 - st ? previous : latest;
        const auto at = static_cast<size_t>(st);
        std::memcpy(gp.params_flat().f32() + offset[at], v.data() + offset[at],
                    (offset[at + 1] - offset[at]) * sizeof(float));
      }
      MicrobatchContexts ctx(*backend, StepInfo{gc.seed, t, m, true}, 0, L, /*with_loss=*/true);
      const Tensor x =
          forward_layers(gm, 0, L, upload_rows(*backend, b.inputs, first, sizes[m]), ctx);
      const Tensor target = upload_rows(*backend, b.targets, first, sizes[m]);
      loss += gm.loss().forward_counting(x, target, kBatch, ctx.loss()).loss;
      Tensor dy = gm.loss().backward(ctx.loss());
      for (int l = L - 1; l >= 0; --l) {
        LayerContext& c = ctx.layer(l);
        Layer& layer = gm.layer(l);
        Tensor dx = gm.needs_input_gradient(l) ? layer.backward_input(dy, c) : Tensor();
        run_backward_weight(layer, dy, c, gp.take_unwritten(l));
        if (m + 1 == M) layer.complete_gradients(*backend);
        c.clear();
        dy = std::move(dx);
      }
      first += sizes[m];
    }
    gp.finish_gradients();
    r.losses.push_back(loss);
    opt.step(weights.params_flat(), gp.grads_flat(), wc.lr.at(t));
    previous = latest;
  }
  r.params = host(weights.params_flat());
  return r;
}

}  // namespace

// Each replica's UPDATE(k) all-reduces (sums) the stage's gradient with the other replicas
// before stepping: R replicas == the delayed update over R*M micro-batches. The sum adds the
// replicas' partial sums, so (as in data_parallel_test.cpp) it is bit-identical to the
// single-device accumulation only when that is the same order (R = 2, M = 1); otherwise within
// kDpTolerance. Every replica ends identical to replica 0, weights and stash, bit for bit. Every
// delay.
TEST_CASE("async pipeline with --dp 2 == the delayed update over 2*M micro-batches") {
  constexpr double kDpTolerance = 1e-6;  // absolute; parameters are ~0.1 in magnitude
  for (const AsyncDelay delay :
       {AsyncDelay::uniform, AsyncDelay::per_stage, AsyncDelay::per_microbatch})
    for (const std::string optimizer : {"sgd", "adamw"})
      for (const auto& item : {std::pair{2, 4}, std::pair{3, 4}, std::pair{2, 1}}) {
        const auto& S = std::get<0>(item);
        const auto& M = std::get<1>(item);
        CAPTURE(async_delay_name(delay));
        CAPTURE(optimizer);
        CAPTURE(S);
        CAPTURE(M);
        constexpr int R = 2;
        Data data;
        const Result ref =
            delay == AsyncDelay::per_microbatch
                ? reference_per_microbatch(optimizer, data, S, R * M, M)
                : reference(optimizer, data, R * M, delay == AsyncDelay::per_stage ? S : 0);
        const DpResult got = data_parallel(optimizer, S, R, M, data, delay);
        REQUIRE(got.params[0].size() == ref.params.size());
        for (float v : got.params[0]) REQUIRE(std::isfinite(v));
        for (int r = 1; r < R; ++r) {
          const auto i = static_cast<size_t>(r);
          CHECK(std::memcmp(got.params[i].data(), got.params[0].data(),
                            ref.params.size() * sizeof(float)) == 0);
          REQUIRE(got.stash[i].size() == got.stash[0].size());
          CHECK(std::memcmp(got.stash[i].data(), got.stash[0].data(),
                            got.stash[0].size() * sizeof(float)) == 0);
        }
        const double diff = compare_tensors(got.params[0], ref.params).max_abs;
        MESSAGE("max |dp - reference| = " << diff);
        if (M == 1) {
          CHECK(diff == 0.0);
          CHECK(got.losses == ref.losses);
        } else {
          CHECK(diff <= kDpTolerance);
          REQUIRE(got.losses.size() == ref.losses.size());
          for (size_t k = 0; k < ref.losses.size(); ++k)
            CHECK(std::fabs(got.losses[k] - ref.losses[k]) <= 1e-6);
        }
      }
}

TEST_CASE("async pipeline == the delayed update on one device, bit for bit") {
  for (const std::string optimizer : {"sgd", "adamw"}) {
    Data data;
    const Result ref = reference(optimizer, data);
    // The delayed update differs from the synchronous one (or the test would prove nothing).
    {
      auto backend = make_cpu_backend(0, 1);
      Model m = dropout_mlp();
      Trainer sync(m, *backend, trainer_config(optimizer));
      for (int t = 0; t < kSteps; ++t) sync.train_step(data.batch(t).inputs, data.batch(t).targets);
      CHECK(host(sync.parameters().params_flat()) != ref.params);
    }
    for (int S : {2, 3, 4}) {
      CAPTURE(optimizer);
      CAPTURE(S);
      const Result got = pipelined(optimizer, S, data);
      CHECK(got.losses == ref.losses);
      REQUIRE(got.params.size() == ref.params.size());
      CHECK(std::memcmp(got.params.data(), ref.params.data(), ref.params.size() * sizeof(float)) ==
            0);
      for (float v : got.params) REQUIRE(std::isfinite(v));
    }
  }
}

TEST_CASE(
    "async pipeline, --async-delay per-stage == its delayed update on one device, bit for bit") {
  for (const std::string optimizer : {"sgd", "adamw"})
    for (int S : {2, 3, 4}) {
      CAPTURE(optimizer);
      CAPTURE(S);
      Data data;
      const Result ref = reference(optimizer, data, 4, S);
      // The last stage's fresh weights change the trajectory (or the test would prove nothing).
      CHECK(ref.params != reference(optimizer, data).params);
      const Result got = pipelined(optimizer, S, data, nullptr, AsyncDelay::per_stage);
      CHECK(got.losses == ref.losses);
      REQUIRE(got.params.size() == ref.params.size());
      for (float v : got.params) REQUIRE(std::isfinite(v));
      CHECK(std::memcmp(got.params.data(), ref.params.data(), ref.params.size() * sizeof(float)) ==
            0);
    }
}

TEST_CASE(
    "async pipeline, --async-delay per-microbatch == its delayed update on one device, bit for "
    "bit") {
  for (const std::string optimizer : {"sgd", "adamw"})
    for (int S : {2, 3, 4}) {
      CAPTURE(optimizer);
      CAPTURE(S);
      Data data;
      const Result ref = reference_per_microbatch(optimizer, data, S);
      // Fresher than per-stage (or the test would prove nothing).
      CHECK(ref.params != reference(optimizer, data, 4, S).params);
      const Result got = pipelined(optimizer, S, data, nullptr, AsyncDelay::per_microbatch);
      CHECK(got.losses == ref.losses);
      REQUIRE(got.params.size() == ref.params.size());
      for (float v : got.params) REQUIRE(std::isfinite(v));
      CHECK(std::memcmp(got.params.data(), ref.params.data(), ref.params.size() * sizeof(float)) ==
            0);
    }
}

TEST_CASE("async pipeline: every backward uses its forward's weight version, two at a time") {
  for (const AsyncDelay delay :
       {AsyncDelay::uniform, AsyncDelay::per_stage, AsyncDelay::per_microbatch})
    for (int S : {2, 3, 4}) {
      CAPTURE(async_delay_name(delay));
      CAPTURE(S);
      Data data;
      std::vector<std::vector<VersionUse>> uses(static_cast<size_t>(S));
      pipelined("sgd", S, data, &uses, delay);
      for (int s = 0; s < S; ++s) {
        CAPTURE(s);
        // uniform: 1; per-stage: 0 on the last stage; per-microbatch: 1 only for the first
        // S - 1 - s micro-batches of a step.
        const auto expected_delay = [&](int m) {
          if (delay == AsyncDelay::uniform) return 1;
          if (delay == AsyncDelay::per_stage) return s == S - 1 ? 0 : 1;
          return m < S - 1 - s ? 1 : 0;
        };
        const auto& list = uses[static_cast<size_t>(s)];
        REQUIRE(list.size() == static_cast<size_t>(2 * 4 * kSteps));  // an F and a B each
        std::map<int64_t, int64_t> forward_version;  // global micro-batch -> version
        int64_t newest = -1;
        std::set<int64_t> seen;
        for (const VersionUse& u : list) {
          CHECK(u.version == u.step - expected_delay(u.action.microbatch % 4));
          const int64_t g = u.step * 4 + u.action.microbatch % 4;
          if (u.action.type == sched::ActionType::F) {
            forward_version[g] = u.version;
          } else {
            REQUIRE(forward_version.count(g));
            CHECK(forward_version[g] == u.version);
          }
          newest = std::max(newest, u.version);
          CHECK(newest - u.version <= 1);  // never older than the one before the newest
          seen.insert(u.version);
        }
        // W(-1) .. W(5), or W(0) .. W(6); per-microbatch before the last stage W(-1) .. W(6).
        const bool both = delay == AsyncDelay::per_microbatch && S - 1 - s > 0;
        CHECK(seen.size() == static_cast<size_t>(kSteps + (both ? 1 : 0)));
        // In the steady state versions really interleave (an older one after a newer one).
        bool interleaved = false;
        int64_t top = -1;
        for (const VersionUse& u : list) {
          interleaved = interleaved || u.version < top;
          top = std::max(top, u.version);
        }
        CHECK(interleaved == (S - 1 - s > 0));
      }
    }
}

TEST_CASE("weight versions: a third version is refused") {
  auto backend = make_cpu_backend(0, 1);
  Model m = dropout_mlp();
  StageParameters params(m, 0, m.num_layers(), *backend, 1);
  WeightVersions v(m, params, 5);
  CHECK_NOTHROW(v.bind(4));
  CHECK_NOTHROW(v.bind(5));
  CHECK_THROWS_AS(v.bind(3), std::logic_error);
  CHECK_THROWS_AS(v.bind(6), std::logic_error);
  // Without a previous version (the last stage with --async-delay per-stage): the latest only.
  Model single = dropout_mlp();
  StageParameters one(single, 0, single.num_layers(), *backend, 1);
  WeightVersions latest_only(single, one, 5, /*keep_previous=*/false);
  CHECK_FALSE(one.has_stash());
  CHECK(latest_only.extra_bytes() == 0);
  CHECK_NOTHROW(latest_only.bind(5));
  CHECK_THROWS_AS(latest_only.bind(4), std::logic_error);
}

TEST_CASE("async pipeline: the refusals name the fix") {
  const auto refused = [](int S, int M, const std::function<void(Model&, PipelineConfig&)>& edit,
                          const std::string& text) {
    CAPTURE(text);
    test::CpuDevices devices(S);
    Model m = dropout_mlp();
    TrainerConfig c = trainer_config("sgd");
    c.microbatches = M;
    PipelineConfig pc = test::pipeline_config(m, c, "1f1b", S, M);
    pc.async_update = true;
    edit(m, pc);
    try {
      PipelineTrainer p(m, devices.devices, pc);
      FAIL("not refused");
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()).find(text) != std::string::npos);
    }
  };
  const auto none = [](Model&, PipelineConfig&) {};
  refused(1, 4, none, "--stages >= 2");
  refused(4, 2, none, "--microbatches >= 3");
  refused(
      2, 4, [](Model&, PipelineConfig& pc) { pc.trainer.clip_norm = 1.f; }, "pass --clip 0");
  refused(
      2, 4, [](Model&, PipelineConfig& pc) { pc.async_window = 0; }, "--async-window 0");
  {
    test::CpuDevices devices(4);
    PipelineConfig pc = test::pipeline_config(dropout_mlp(), trainer_config("sgd"), "1f1b", 2, 4);
    pc.async_update = true;
    pc.parallel.shard_optimizer = true;
    CHECK_THROWS_WITH_AS(make_local_data_parallel(dropout_mlp, devices.devices, pc, 2),
                         doctest::Contains("drop --shard-optimizer"), UsageError);
  }
}

TEST_CASE("async pipeline: tied parameters on different stages are refused") {
  test::CpuDevices devices(2);
  Model m = gpt(16, 8, 8, 2, 2);
  TrainerConfig c = trainer_config("sgd");
  PipelineConfig pc = test::pipeline_config(m, c, "1f1b", 2, 4);
  pc.async_update = true;
  CHECK_THROWS_WITH_AS(PipelineTrainer(m, devices.devices, pc),
                       doctest::Contains("share a tied parameter"), UsageError);
}

TEST_CASE("async pipeline: a checkpoint at a window end resumes the same trajectory") {
  // Saved after an odd and an even number of updates: each UPDATE swaps the arenas that hold
  // the latest and the previous version, so both arrangements are saved and resumed.
  for (const auto& item :
       {std::tuple{2, AsyncDelay::uniform, 4}, std::tuple{2, AsyncDelay::uniform, 3},
        std::tuple{3, AsyncDelay::uniform, 4}, std::tuple{2, AsyncDelay::per_stage, 3},
        std::tuple{3, AsyncDelay::per_microbatch, 3},
        std::tuple{3, AsyncDelay::per_microbatch, 4}}) {
    const auto& S = std::get<0>(item);
    const auto& delay = std::get<1>(item);
    const auto& split = std::get<2>(item);
    CAPTURE(S);
    CAPTURE(async_delay_name(delay));
    CAPTURE(split);
    Data data;
    const Result whole = pipelined("adamw", S, data, nullptr, delay);  // steps 0..6 at once
    test::TempDir dir;
    const auto path = dir.path / "ckpt";
    std::vector<HostBatch> batches;
    for (int t = 0; t < kSteps; ++t) batches.push_back(data.batch(t));
    {
      test::CpuDevices devices(S);
      Model m = dropout_mlp();
      PipelineTrainer p(m, devices.devices, async_config(m, "adamw", S, delay));
      p.train_steps(std::span(batches).first(static_cast<size_t>(split)));
      save(path, m, p);
    }
    test::CpuDevices devices(S);
    Model m = dropout_mlp();
    PipelineTrainer p(m, devices.devices, async_config(m, "adamw", S, delay));
    const std::vector<StageState> stages = p.all_stage_copies();
    const TrainingState loaded = load_checkpoint(path, m, stages);
    REQUIRE(loaded.step == split);
    p.set_step(loaded.step);
    std::vector<double> losses;
    for (const StepStats& st :
         p.train_steps(std::span(batches).subspan(static_cast<size_t>(split))))
      losses.push_back(st.loss);
    CHECK(losses == std::vector<double>(whole.losses.begin() + split, whole.losses.end()));
    std::vector<float> params;
    for (int s = 0; s < S; ++s) {
      const auto v = host(p.stage_parameters(s).params_flat());
      params.insert(params.end(), v.begin(), v.end());
    }
    REQUIRE(params.size() == whole.params.size());
    CHECK(std::memcmp(params.data(), whole.params.data(), params.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("async pipeline: a checkpoint without a weight stash is refused") {
  test::TempDir dir;
  const auto path = dir.path / "sync";
  {
    auto backend = make_cpu_backend(0, 1);
    Model m = dropout_mlp();
    Trainer t(m, *backend, trainer_config("sgd"));
    save(path, m, t);
  }
  test::CpuDevices devices(2);
  Model m = dropout_mlp();
  PipelineTrainer p(m, devices.devices, async_config(m, "sgd", 2));
  const std::vector<StageState> stages = p.all_stage_copies();
  CHECK_THROWS_WITH_AS(load_checkpoint(path, m, stages),
                       doctest::Contains("resume it with --update sync"), FileError);
}

// --async-delay per-stage keeps no second version of the last stage: its checkpoint resumes with
// per-stage, and with uniform (which needs the last stage's W(t - 1)) is refused naming the flag.
TEST_CASE("async pipeline: a per-stage checkpoint needs --async-delay per-stage to resume async") {
  test::TempDir dir;
  const auto path = dir.path / "per-stage";
  Data data;
  std::vector<HostBatch> batches{data.batch(0), data.batch(1)};
  {
    test::CpuDevices devices(2);
    Model m = dropout_mlp();
    PipelineTrainer p(m, devices.devices, async_config(m, "sgd", 2, AsyncDelay::per_stage));
    p.train_steps(batches);
    save(path, m, p);
  }
  test::CpuDevices devices(2);
  Model m = dropout_mlp();
  PipelineTrainer uniform(m, devices.devices, async_config(m, "sgd", 2));
  CHECK_THROWS_WITH_AS(load_checkpoint(path, m, uniform.all_stage_copies()),
                       doctest::Contains("the --async-delay it was written with"), FileError);
  PipelineTrainer per_stage(m, devices.devices, async_config(m, "sgd", 2, AsyncDelay::per_stage));
  CHECK(load_checkpoint(path, m, per_stage.all_stage_copies()).step == 2);
}

TEST_CASE("async pipeline: a non-finite gradient ends the run naming the step and the stage") {
  test::CpuDevices devices(2);
  Model m = dropout_mlp();
  PipelineTrainer p(m, devices.devices, async_config(m, "sgd", 2));
  Data data;
  std::vector<HostBatch> batches{data.batch(0), data.batch(1)};
  std::vector<float> poisoned(data.d.inputs.begin() + kBatch * 36,
                              data.d.inputs.begin() + 2 * kBatch * 36);
  poisoned[5] = std::nanf("");
  batches[1].inputs = Tensor::borrow(poisoned.data(), Shape{kBatch, 1, 6, 6});
  std::string what;
  try {
    p.train_steps(batches);
  } catch (const std::exception& e) {
    what = e.what();
  }
  CHECK(what.find("step 1: the gradients of stage") != std::string::npos);
  CHECK(what.find("are not finite") != std::string::npos);
}
