// The parameter server with pipeline stages (--ps K --dp R --stages S, in one process): each
// stage's worker pushes and pulls its own layers only. What is checked:
// - the shards' pieces: every server's layers cut at the stage boundaries, offsets in the
//   stage's own arena, covering each stage exactly once;
// - synchronous == --dp R --stages S all-reduce, bit for bit (SGD momentum + clip, AdamW + clip;
//   K = 1: one server holds layers of both stages; K = 2: the norm exchanged between servers);
// - asynchronous (T = 1) trains, staleness (per stage) observed and within the bound;
// - a checkpoint saved at step k and resumed == uninterrupted, parameters and the servers'
//   optimizer state, bit for bit;
// - what cannot work is refused before any work, naming the flag.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>

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

constexpr int kStages = 2;
constexpr float kClip = 0.1f;  // below the gradient norms here: clipping is active

using test::same;
Model small_mlp() { return test::ps_small_mlp(); }

TrainerConfig trainer_config(const std::string& optim, float clip = kClip, bool cosine = true) {
  return test::ps_trainer_config(optim, cosine, clip);
}

TrainingOptions options(int R, int K, int T, double slow = 1.0) {
  TrainingOptions opt;
  opt.devices = fmt::format("cpu:0..{}", R * kStages - 1);
  opt.threads = 1;
  opt.dp = R;
  opt.stages = kStages;
  opt.microbatches = 2;
  opt.ps = K;
  opt.staleness = K > 0 ? T : -1;
  opt.print = false;
  opt.timeout_s = 20;
  if (slow > 1.0) {
    opt.slow_replica = R - 1;
    opt.slow_factor = slow;
  }
  return opt;
}

using Named = test::NamedFloats;

struct Run {
  std::vector<Named> params;  // per replica
  Named state;                // replica 0's optimizer state (fetched from the servers)
  std::vector<double> losses;
  double max_norm = 0;  // of the gradient, before clipping
  std::vector<PsServerStats> stats;
};

// `steps` steps (K = 0: all-reduce), resumed from `resume` when given, saving to `save` after
// step `save_at` (0: no save).
Run train(int R, int K, int T, const std::string& optim, int steps, double slow = 1.0,
          float clip = kClip, const std::string& resume = "", const std::string& save = "",
          int save_at = 0, bool cosine = true) {
  const int64_t batch = 24;
  Model model = small_mlp();
  TrainingRun run = make_training(options(R, K, T, slow), model, small_mlp,
                                  trainer_config(optim, clip, cosine), batch);
  CheckpointOptions co;
  co.resume = resume;
  co.layout = run.layout;
  RunCheckpoints ckpts(co, nullptr);
  if (!resume.empty()) REQUIRE(ckpts.resume(*run.engine).has_value());
  const test::PsData data(batch);
  Run out;
  for (int k = static_cast<int>(run.engine->step()); k < steps; ++k) {
    const StepStats st = run.engine->train_step(data.x, data.y);
    out.losses.push_back(st.loss);
    out.max_norm = std::max(out.max_norm, st.grad_norm);
    if (k == steps / 2) CHECK(std::isfinite(run.engine->evaluate(data.x, data.y).loss));
    if (run.engine->step() == save_at) test::save_now(run, save);
  }
  out.state = test::optimizer_state(run.engine->stages_to_save());
  if (auto* ps = dynamic_cast<ParameterServerTrainer*>(run.engine.get())) {
    for (int r = 0; r < R; ++r)
      out.params.push_back(test::params_by_name(ps->workers().replica(r).stage_states()));
    out.stats = ps->finish();
  } else {
    auto& dp = dynamic_cast<DataParallelTrainer&>(*run.engine);
    for (int r = 0; r < R; ++r)
      out.params.push_back(test::params_by_name(dp.replica(r).stage_states()));
  }
  return out;
}

}  // namespace

TEST_CASE("parameter-server pieces: each server's layers cut at the stage boundaries") {
  const Model m = deep_mlp(6, 64, Shape{1, 8, 8});
  const std::vector<int> stages{5, 4, m.num_layers() - 9};
  // Each stage's arena, as StageParameters lays it out.
  std::vector<size_t> stage_bytes;
  int first = 0;
  test::CpuDevices cpu(1);
  for (int n : stages) {
    StageParameters p(m, first, first + n, *cpu.devices[0], 1);
    stage_bytes.push_back(static_cast<size_t>(p.params_flat().numel()) * sizeof(float));
    first += n;
  }
  for (int K : {1, 2, 3}) {
    CAPTURE(K);
    const auto shards = shard_by_layer(m, K, stages);
    std::vector<size_t> covered(stages.size(), 0);
    size_t global = 0;
    for (const PsShard& sh : shards) {
      REQUIRE(!sh.pieces.empty());
      size_t tensors = 0;
      for (const PsPiece& p : sh.pieces) {
        const auto s = static_cast<size_t>(p.stage);
        CHECK(p.begin % 64 == 0);
        CHECK(p.end % 64 == 0);
        CHECK(p.begin == covered[s]);  // contiguous, in order
        covered[s] = p.end;
        for (const PsTensor& t : p.tensors) CHECK(t.global_index == global++);
        tensors += p.tensors.size();
      }
      CHECK(tensors == sh.tensors.size());  // the same tensors as the one-stage layout
    }
    for (size_t s = 0; s < stages.size(); ++s) CHECK(covered[s] == stage_bytes[s]);
  }
}

TEST_CASE(
    "synchronous parameter server with 2 stages == --dp 2 --stages 2 all-reduce, bit for bit") {
  const int R = 2, steps = 4;
  for (const std::string optim : {"sgd", "adamw"}) {
    const Run ref = train(R, 0, 0, optim, steps);
    const Run start = train(R, 0, 0, optim, 0);
    for (int K : {1, 2}) {
      CAPTURE(optim);
      CAPTURE(K);
      const Run got = train(R, K, 0, optim, steps);
      for (int r = 0; r < R; ++r) CHECK(same(got.params[static_cast<size_t>(r)], ref.params[0]));
      CHECK(same(got.state, ref.state));
      REQUIRE(got.losses.size() == ref.losses.size());
      for (size_t k = 0; k < ref.losses.size(); ++k) CHECK(got.losses[k] == ref.losses[k]);
      CHECK(!same(start.params[0], got.params[0]));  // the servers did update
      CHECK(got.max_norm > kClip);                   // clipping was active
      CHECK(got.max_norm == ref.max_norm);
      REQUIRE(got.stats.size() == static_cast<size_t>(K));
      int pieces = 0;
      for (const PsServerStats& s : got.stats) {
        pieces += s.pieces;
        CHECK(s.pushes == steps * R * s.pieces);
        CHECK(s.updates == steps);
        CHECK(s.max_staleness == 0);
      }
      CHECK(pieces >= kStages);  // every stage's layers live on some server
      if (K == 1) CHECK(got.stats[0].pieces == kStages);
    }
  }
}

TEST_CASE("asynchronous parameter server with 2 stages (T = 1): trains, staleness bounded") {
  const int R = 2, T = 1, steps = 30;
  const Run got = train(R, 1, T, "sgd", steps, /*slow=*/2.0, /*clip=*/0.f, "", "", 0, false);
  const Run sync = train(R, 1, 0, "sgd", steps, 1.0, 0.f, "", "", 0, false);
  REQUIRE(got.losses.size() == steps);
  for (double l : got.losses) REQUIRE(std::isfinite(l));
  MESSAGE("loss: first ", got.losses.front(), ", async last ", got.losses.back(), ", sync last ",
          sync.losses.back());
  // It learns about as well as synchronous training in the same number of steps.
  CHECK(got.losses.back() < 0.9 * got.losses.front());
  CHECK(got.losses.back() < 1.05 * sync.losses.back());
  REQUIRE(got.stats.size() == 1);
  const PsServerStats& s = got.stats[0];
  CHECK(s.pieces == kStages);
  CHECK(s.pushes == steps * R * kStages);
  CHECK(s.updates == steps * R * kStages);  // one update per push
  CHECK(s.max_staleness > 0);
  CHECK(s.max_staleness <= T * R + R - 1);  // per stage, in that stage's pushes
}

TEST_CASE("parameter-server checkpoints with 2 stages: save at step k + resume == uninterrupted") {
  const auto dir = std::filesystem::temp_directory_path() / "pipetrain_ps_stages_ckpt_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int R = 2, steps = 6, k = 3;
  for (const std::string optim : {"sgd", "adamw"}) {
    CAPTURE(optim);
    const std::string ck = (dir / optim).string();
    const Run whole = train(R, 2, 0, optim, steps, 1.0, kClip, "", ck, k);
    const Run resumed = train(R, 2, 0, optim, steps, 1.0, kClip, ck);
    CHECK(resumed.losses.size() == steps - k);
    CHECK(same(resumed.params[0], whole.params[0]));
    CHECK(same(resumed.state, whole.state));
    // The saved state is the servers' (all-reduce resumed from it continues the same way).
    const Run ar = train(R, 0, 0, optim, steps, 1.0, kClip, ck);
    CHECK(same(ar.params[0], whole.params[0]));
    CHECK(same(ar.state, whole.state));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("parameter server with stages: what cannot work is refused before any work") {
  Model m = small_mlp();
  // Asynchronous pushes hold one stage's gradients: no global norm for --clip-norm.
  CHECK_THROWS_WITH_AS(make_training(options(2, 1, 1), m, small_mlp, trainer_config("sgd"), 24),
                       doctest::Contains("needs --stages 1"), UsageError);
  // Several stages on one device (interleaved): a worker is one stage on one device.
  TrainingOptions interleaved = options(1, 1, 0);
  interleaved.devices = "cpu:0..1";  // --stages 2: two devices, two chunks each
  interleaved.schedule = ScheduleChoice::parse("interleaved:2");
  CHECK_THROWS_WITH_AS(make_training(interleaved, m, small_mlp, trainer_config("sgd"), 24),
                       doctest::Contains("--ps needs stage s on device s"), UsageError);
  // Tied parameters (GPT's default) are refused with the fix.
  CHECK_THROWS_WITH_AS(shard_by_layer(gpt(16, 4, 8, 2, 2), 1, {}), doctest::Contains("--untied"),
                       UsageError);
}
