// The parameter server in one process (K server threads, R worker replicas, in-process
// communicators). What is checked:
// - sharding: whole layers, contiguous, covering the arena, balanced by bytes;
// - synchronous (--staleness 0) equals --dp R all-reduce training bit for bit, with SGD momentum
//   and AdamW, clipping on, K = 1 and K = 2 (the norm exchanged between servers), R = 2 and 3;
// - asynchronous (T = 1) trains (the loss goes down), observed staleness is > 0 (pushes are
//   applied one by one) and within the bound T * R + R - 1 pushes;
// - checkpoints (the servers' optimizer state in the usual format): sync PS saved at step k and
//   resumed == uninterrupted, bit for bit; a PS checkpoint resumed as --dp R all-reduce and an
//   all-reduce checkpoint resumed with --ps == continuing uninterrupted; asynchronous save
//   holds the servers' momentum, and resuming from it restores the servers' state and trains on;
// - bad combinations are refused before any work, naming the flag.
#include <doctest/doctest.h>

#include <filesystem>

#include <cmath>
#include <cstring>
#include <functional>

#include <fmt/format.h>

#include "../engine/synthetic.h"
#include "engine/checkpoint/run_checkpoints.h"
#include "engine/core/error.h"
#include "engine/replicas/ps_trainer.h"
#include "engine/setup/training_options.h"
#include "engine/setup/training_run.h"
#include "layers/zoo.h"
#include "pipeline_test_util.h"
#include "ps_test_util.h"

using namespace pt;

namespace {

using test::same;
using test::same_bits;
Model small_mlp() { return test::ps_small_mlp(); }
using Data = test::PsData;

TrainerConfig trainer_config(const std::string& optim, bool cosine = true) {
  return test::ps_trainer_config(optim, cosine);
}

// Every replica's parameters after `steps` steps, and the losses.
struct Run {
  std::vector<std::vector<float>> params;  // per replica, all tensors concatenated
  std::vector<double> losses;
  std::vector<PsServerStats> stats;
  size_t worker_optimizer_bytes = 0;  // summed over the replicas, after the last step
};

std::vector<float> flat(const std::vector<StageState>& stages) {
  std::vector<float> out;
  for (const auto& [name, v] : test::params_by_name(stages))
    out.insert(out.end(), v.begin(), v.end());
  return out;
}

Run train(int R, int K, int T, const std::string& optim, int steps, double slow = 1.0,
          bool cosine = true) {
  TrainingOptions opt;
  opt.devices = fmt::format("cpu:0..{}", R - 1);
  opt.threads = 1;
  opt.dp = R;
  opt.ps = K;
  opt.staleness = K > 0 ? T : -1;
  opt.force_pipeline = true;
  opt.print = false;
  opt.timeout_s = 20;
  if (slow > 1.0) {
    opt.slow_replica = R - 1;
    opt.slow_factor = slow;
  }
  const int64_t batch = 24;
  Model model = small_mlp();
  TrainingRun run = make_training(opt, model, small_mlp, trainer_config(optim, cosine), batch);
  const Data data(batch);
  Run out;
  for (int k = 0; k < steps; ++k) {
    out.losses.push_back(run.engine->train_step(data.x, data.y).loss);
    // An evaluation mid-run (asynchronous workers PAUSE, then RESUME with a fresh pull).
    if (k == steps / 2) CHECK(std::isfinite(run.engine->evaluate(data.x, data.y).loss));
  }
  if (auto* ps = dynamic_cast<ParameterServerTrainer*>(run.engine.get())) {
    for (int r = 0; r < R; ++r) {
      out.params.push_back(flat(ps->workers().replica(r).stage_states()));
      out.worker_optimizer_bytes += ps->workers().replica(r).optimizer_state_bytes();
    }
    out.stats = ps->finish();
  } else {
    auto& dp = dynamic_cast<DataParallelTrainer&>(*run.engine);
    for (int r = 0; r < R; ++r) {
      out.params.push_back(flat(dp.replica(r).stage_states()));
      out.worker_optimizer_bytes += dp.replica(r).optimizer_state_bytes();
    }
  }
  return out;
}

}  // namespace

TEST_CASE("parameter server shards: whole layers, contiguous, covering, balanced by bytes") {
  const Model m = deep_mlp(6, 64, Shape{1, 8, 8});
  for (int K : {1, 2, 3, 4}) {
    CAPTURE(K);
    const auto shards = shard_by_layer(m, K);
    REQUIRE(shards.size() == static_cast<size_t>(K));
    CHECK(shards.front().begin == 0);
    CHECK(shards.front().first_layer == 0);
    CHECK(shards.back().last_layer == m.num_layers());
    size_t tensors = 0, largest = 0, total = 0;
    for (size_t k = 0; k < shards.size(); ++k) {
      CHECK(shards[k].begin % 64 == 0);
      CHECK(shards[k].end > shards[k].begin);
      CHECK(!shards[k].tensors.empty());
      if (k > 0) {
        CHECK(shards[k].begin == shards[k - 1].end);
        CHECK(shards[k].first_layer == shards[k - 1].last_layer);
      }
      for (const auto& t : shards[k].tensors) CHECK(t.global_index == tensors++);
      largest = std::max(largest, shards[k].end - shards[k].begin);
      total += shards[k].end - shards[k].begin;
    }
    // Balanced: no shard above 1/K of the bytes plus the largest layer (64x64 + 64 floats).
    CHECK(largest <= total / static_cast<size_t>(K) + (64 * 64 + 64) * 4 + 64);
  }
  CHECK_THROWS_AS(shard_by_layer(small_mlp(), 50), UsageError);
}

TEST_CASE("synchronous parameter server == --dp R all-reduce, bit for bit (SGD, AdamW, clip)") {
  for (const std::string optim : {"sgd", "adamw"})
    for (int R : {2, 3})
      for (int K : {1, 2}) {
        CAPTURE(optim);
        CAPTURE(R);
        CAPTURE(K);
        const Run ref = train(R, 0, 0, optim, 4);
        const Run got = train(R, K, 0, optim, 4);
        for (int r = 0; r < R; ++r)
          CHECK(same_bits(got.params[static_cast<size_t>(r)], ref.params[0]));
        for (size_t k = 0; k < ref.losses.size(); ++k) CHECK(got.losses[k] == ref.losses[k]);
        // Parameters moved (a server that did nothing would leave the initial values).
        const Run start = train(R, 0, 0, optim, 0);
        CHECK(!same_bits(start.params[0], got.params[0]));
        REQUIRE(got.stats.size() == static_cast<size_t>(K));
        size_t held = 0;
        for (const PsServerStats& s : got.stats) {
          CHECK(s.pushes == 4 * R);
          CHECK(s.updates == 4);
          CHECK(s.max_staleness == 0);
          held += s.held_bytes;
        }
        // Parameters, the replicas' summed gradients, and the optimizer's slots (momentum; m, v),
        // each the size of the pieces: the parameters and the 64-byte alignment between tensors.
        const size_t copies = optim == "sgd" ? 3 : 4;
        const size_t bytes = got.params[0].size() * sizeof(float);
        CHECK(held % copies == 0);
        CHECK(held / copies >= bytes);
        CHECK(held / copies < bytes + 1024);
        // ... and the workers none (an all-reduce replica holds its own).
        CHECK(got.worker_optimizer_bytes == 0);
        CHECK(ref.worker_optimizer_bytes == held / copies * (copies - 2) * R);
      }
}

TEST_CASE("asynchronous parameter server (T = 1): trains, staleness observed and bounded") {
  const int R = 2, T = 1;
  const Run got = train(R, 1, T, "sgd", 30, /*slow=*/2.0, /*cosine=*/false);
  const Run sync = train(R, 1, 0, "sgd", 30, 1.0, false);
  MESSAGE("loss: first ", got.losses.front(), ", async last ", got.losses.back(), ", sync last ",
          sync.losses.back());
  REQUIRE(got.losses.size() == 30);
  for (double l : got.losses) REQUIRE(std::isfinite(l));
  // It learns about as well as synchronous training in the same number of steps.
  CHECK(got.losses.back() < 0.9 * got.losses.front());
  CHECK(got.losses.back() < 1.05 * sync.losses.back());
  REQUIRE(got.stats.size() == 1);
  const PsServerStats& s = got.stats[0];
  CHECK(s.pushes == 30 * R);
  CHECK(s.updates == 30 * R);  // one update per push
  CHECK(s.max_staleness > 0);
  CHECK(s.max_staleness <= T * R + R - 1);
  CHECK(s.mean_staleness() > 0);
  // Parameters and momentum, and per worker its push (replies go straight from the parameters),
  // where the synchronous server holds parameters, momentum and the summed gradient.
  REQUIRE(sync.stats.size() == 1);
  CHECK(s.held_bytes * 3 == sync.stats[0].held_bytes * (2 + R));
}

namespace {

// `steps` steps of R replicas (K = 0: all-reduce), resumed from `resume` when given, saving to
// `save` after step `save_at` (0: no save). Returns replica 0's parameters and optimizer state
// (fetched from the servers under --ps) and the losses.
struct CkptRun {
  std::map<std::string, std::vector<float>> params, state;
  std::vector<double> losses;
  int64_t optimizer_steps = 0;
};
CkptRun train_ckpt(int R, int K, int T, const std::string& optim, int steps,
                   const std::string& resume, const std::filesystem::path& save, int save_at) {
  TrainingOptions opt;
  opt.devices = fmt::format("cpu:0..{}", R - 1);
  opt.threads = 1;
  opt.dp = R;
  opt.ps = K;
  opt.staleness = K > 0 ? T : -1;
  opt.force_pipeline = true;
  opt.print = false;
  opt.timeout_s = 20;
  const int64_t batch = 24;
  Model model = small_mlp();
  TrainingRun run = make_training(opt, model, small_mlp, trainer_config(optim), batch);
  CheckpointOptions co;
  co.resume = resume;
  co.layout = run.layout;
  RunCheckpoints ckpts(co, nullptr);
  if (!resume.empty()) REQUIRE(ckpts.resume(*run.engine).has_value());
  const Data data(batch);
  CkptRun out;
  for (int k = static_cast<int>(run.engine->step()); k < steps; ++k) {
    out.losses.push_back(run.engine->train_step(data.x, data.y).loss);
    if (run.engine->step() == save_at) test::save_now(run, save.string());
  }
  const std::vector<StageState> held = run.engine->stages_to_save();  // fetched from the servers
  out.params = test::params_by_name(held);
  REQUIRE(held.size() == 1);
  out.optimizer_steps = held[0].optimizer->steps_taken();
  out.state = test::optimizer_state(held);
  return out;
}

}  // namespace

TEST_CASE("parameter-server checkpoints: save at step k + resume == uninterrupted, any layout") {
  const auto dir = std::filesystem::temp_directory_path() / "pipetrain_ps_ckpt_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int R = 2, steps = 6, k = 3;
  for (const std::string optim : {"sgd", "adamw"}) {
    CAPTURE(optim);
    const std::string ps_ck = (dir / ("ps_" + optim)).string();
    const std::string ar_ck = (dir / ("ar_" + optim)).string();
    const CkptRun ps = train_ckpt(R, 2, 0, optim, steps, "", ps_ck, k);
    const CkptRun ar = train_ckpt(R, 0, 0, optim, steps, "", ar_ck, k);
    // The optimizer state moved (momentum / moments are not zeros).
    bool nonzero = false;
    for (const auto& [n, v] : ps.state)
      for (float x : v) nonzero = nonzero || x != 0.f;
    CHECK(nonzero);
    CHECK(same(ps.params, ar.params));  // sync PS == all-reduce (as before)
    CHECK(same(ps.state, ar.state));    // and the servers' state == the all-reduce's
    {                                   // PS -> PS
      const CkptRun got = train_ckpt(R, 2, 0, optim, steps, ps_ck, "", 0);
      CHECK(got.losses.size() == steps - k);
      CHECK(same(got.params, ps.params));
      CHECK(same(got.state, ps.state));
    }
    {  // PS (K = 2) -> PS (K = 1)
      const CkptRun got = train_ckpt(R, 1, 0, optim, steps, ps_ck, "", 0);
      CHECK(same(got.params, ps.params));
      CHECK(same(got.state, ps.state));
    }
    {  // PS -> all-reduce --dp 2
      const CkptRun got = train_ckpt(R, 0, 0, optim, steps, ps_ck, "", 0);
      CHECK(same(got.params, ps.params));
      CHECK(same(got.state, ps.state));
    }
    {  // all-reduce -> PS
      const CkptRun got = train_ckpt(R, 2, 0, optim, steps, ar_ck, "", 0);
      CHECK(same(got.params, ar.params));
      CHECK(same(got.state, ar.state));
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("asynchronous parameter-server checkpoints hold the servers' state and resume") {
  const auto dir = std::filesystem::temp_directory_path() / "pipetrain_ps_async_ckpt_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int R = 2, steps = 6, k = 3;
  const std::string ck = (dir / "async").string();
  const CkptRun async = train_ckpt(R, 1, 1, "sgd", steps, "", ck, k);
  for (double l : async.losses) REQUIRE(std::isfinite(l));
  // The checkpoint holds the servers' optimizer steps (one per push: R per step) and momentum.
  {
    Model m = small_mlp();
    TrainingRun run = make_training(
        [] {
          TrainingOptions o;
          o.devices = "cpu:0";
          o.force_pipeline = true;
          o.print = false;
          return o;
        }(),
        m, small_mlp, trainer_config("sgd"), 24);
    const std::vector<StageState> copies = run.engine->all_stage_copies();
    const TrainingState st = load_checkpoint(ck, run.engine->model(), copies);
    CHECK(st.step == k);
    REQUIRE(copies.size() == 1);
    CHECK(copies[0].optimizer->steps_taken() == R * k);
    bool nonzero = false;
    const Tensor mom = copies[0].optimizer->slots().at(0).state.flat();
    for (int64_t i = 0; i < mom.numel(); ++i) nonzero = nonzero || mom.f32()[i] != 0.f;
    CHECK(nonzero);
  }
  // Resumed asynchronously: the servers continue from the saved step count (R * k + R per step).
  const CkptRun on = train_ckpt(R, 1, 1, "sgd", steps, ck, "", 0);
  CHECK(on.losses.size() == steps - k);
  CHECK(async.optimizer_steps == R * steps);
  CHECK(on.optimizer_steps == R * steps);
  for (double l : on.losses) CHECK(std::isfinite(l));
  // The servers' momentum reached the checkpoint and the servers start from it: resumed with
  // synchronous --ps it equals all-reduce --dp 2 resumed from it, bit for bit.
  const CkptRun ps = train_ckpt(R, 1, 0, "sgd", steps, ck, "", 0);
  const CkptRun ar = train_ckpt(R, 0, 0, "sgd", steps, ck, "", 0);
  CHECK(same(ps.params, ar.params));
  CHECK(same(ps.state, ar.state));
  std::filesystem::remove_all(dir);
}

TEST_CASE("parameter server options are refused before any work, naming the flag") {
  const auto refused = [](TrainingOptions o, const std::string& says) {
    CAPTURE(says);
    try {
      o.check(64);
      FAIL("accepted");
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()).find(says) != std::string::npos);
    }
  };
  TrainingOptions o;
  o.staleness = 1;
  refused(o, "--staleness 1 needs --ps K");
  o.ps = 1;
  o.staleness = -2;
  refused(o, "--staleness");
  o.staleness = 0;
  o.dp = 2;
  o.slow_replica = 2;
  refused(o, "--slow-worker 2:1 names replica 2 but --dp is 2");
  o.slow_replica = 1;
  o.slow_factor = 0.5;
  refused(o, "--slow-worker factor");
  o.slow_factor = 2;
  CHECK_NOTHROW(o.check(64));
  o.shard_optimizer = true;
  refused(o, "--shard-optimizer with --ps");
  o.shard_optimizer = false;
  // --clip-norm with asynchronous updates over several servers.
  TrainingOptions a;
  a.devices = "cpu:0..1";
  a.dp = 2;
  a.ps = 2;
  a.staleness = 1;
  a.print = false;
  Model m = small_mlp();
  CHECK_THROWS_WITH_AS(make_training(a, m, small_mlp, trainer_config("sgd"), 24),
                       doctest::Contains("needs --ps 1"), UsageError);
}
