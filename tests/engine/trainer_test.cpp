// The single-device trainer: gradient accumulation equals the full-batch gradient, determinism,
// the inf/NaN skip, and checkpoints (round trip, exact resume, refusal of bad files).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>

#include <unistd.h>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/manifest.h"
#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "engine/loop/fit.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"
#include "synthetic.h"

using namespace pt;

namespace {

std::vector<float> host_copy(const Tensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

struct Batch {
  Dataset data;
  Tensor x, y;
  explicit Batch(int64_t n) : data(test::synthetic_dataset(n, Shape{1, 4, 4}, 10, 3)) {
    x = Tensor::borrow(data.inputs.data(), data.sample_shape.with_batch(n));
    y = Tensor::borrow(data.labels.data(), Shape{n}, DType::i32);
  }
};

TrainerConfig config(int microbatches) {
  TrainerConfig c;
  c.microbatches = microbatches;
  c.seed = 11;
  c.optimizer.kind = "sgd";
  c.optimizer.lr = 0.05f;
  c.optimizer.momentum = 0.9f;
  c.lr = {LrSchedule::Kind::constant, 0.05f, 0, 0, 0.f};
  return c;
}

std::filesystem::path temp_dir() {
  auto dir = std::filesystem::temp_directory_path() /
             ("pipetrain_trainer_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("accumulating M micro-batches gives the full-batch gradient and loss") {
  auto backend = make_cpu_backend(0, 1);
  Batch b(24);
  Model m1 = deep_mlp(3, 32, {1, 4, 4});
  Trainer t1(m1, *backend, config(1));
  const StepStats s1 = t1.train_step(b.x, b.y);
  const auto g1 = host_copy(t1.parameters().grads_flat());
  for (int M : {2, 3, 5, 24}) {
    CAPTURE(M);
    Model mm = deep_mlp(3, 32, {1, 4, 4});
    Trainer tm(mm, *backend, config(M));
    const StepStats sm = tm.train_step(b.x, b.y);
    const auto gm = host_copy(tm.parameters().grads_flat());
    // Tolerance: fp32 sums in another order; |a - b| <= 1e-6 + 1e-4 |a|.
    CHECK(sm.loss == doctest::Approx(s1.loss).epsilon(1e-6));
    CHECK(sm.correct == s1.correct);
    size_t bad = 0;
    for (size_t i = 0; i < g1.size(); ++i)
      if (std::abs(g1[i] - gm[i]) > 1e-6f + 1e-4f * std::abs(g1[i])) ++bad;
    CHECK(bad == 0);
  }
}

TEST_CASE(
    "each step's gradients start from nothing: NaN left in them before a step does not leak") {
  // The trainer does not zero the gradients: each layer's first weight gradient of a step writes
  // them (StageParameters::start_gradients). NaN put there between steps must not survive, and
  // the step must not add to the previous step's gradients either (the untouched run's match).
  auto backend = make_cpu_backend(0, 1);
  Batch b(24);
  for (int M : {1, 3}) {
    CAPTURE(M);
    Model m1 = deep_mlp(3, 32, {1, 4, 4});
    Model m2 = deep_mlp(3, 32, {1, 4, 4});
    Trainer clean(m1, *backend, config(M));
    Trainer dirty(m2, *backend, config(M));
    for (int step = 0; step < 2; ++step) {
      // Every tensor's gradient (the arena's alignment padding between them is never written).
      const StageParameters& sp = dirty.parameters();
      for (size_t e = 0; e < sp.entries().size(); ++e)
        backend->fill(sp.grad(e).f32(), std::numeric_limits<float>::quiet_NaN(),
                      sp.grad(e).numel());
      clean.train_step(b.x, b.y);
      dirty.train_step(b.x, b.y);
      const auto want = host_copy(clean.parameters().grads_flat());
      const auto got = host_copy(dirty.parameters().grads_flat());
      REQUIRE(got.size() == want.size());
      size_t nan = 0;
      for (float v : got) nan += std::isnan(v) ? 1 : 0;
      CHECK(nan == 0);
      CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
      const auto p1 = host_copy(clean.parameters().params_flat());
      const auto p2 = host_copy(dirty.parameters().params_flat());
      CHECK(std::memcmp(p1.data(), p2.data(), p1.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("training is deterministic: same seed, same bits") {
  auto backend = make_cpu_backend(0, 1);
  Batch b(32);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    Model m = deep_mlp(2, 16, {1, 4, 4});
    Trainer t(m, *backend, config(4));
    for (int i = 0; i < 3; ++i) t.train_step(b.x, b.y);
    auto p = host_copy(t.parameters().params_flat());
    if (run == 0)
      first = p;
    else
      CHECK(std::memcmp(first.data(), p.data(), p.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("a step reports the device memory held from the system: at least the parameters, flat") {
  auto backend = make_cpu_backend(0, 1);
  Batch b(32);
  Model m = deep_mlp(2, 16, {1, 4, 4});
  Trainer t(m, *backend, config(4));
  const size_t params = t.parameters().params_flat().bytes();
  std::vector<size_t> reserved;
  for (int i = 0; i < 4; ++i) reserved.push_back(t.train_step(b.x, b.y).reserved_bytes);
  CHECK(reserved[0] >= 2 * params);  // parameters and gradients at least
  CHECK(reserved[0] == backend->memory_stats().reserved_bytes);
  CHECK(reserved[1] == reserved[2]);  // the cache serves every later step's activations
  CHECK(reserved[2] == reserved[3]);
}

TEST_CASE("non-finite gradients skip the step and leave parameters unchanged") {
  auto backend = make_cpu_backend(0, 1);
  Batch b(8);
  b.data.inputs[5] = std::nanf("");
  Model m = deep_mlp(1, 8, {1, 4, 4});
  Trainer t(m, *backend, config(2));
  const auto before = host_copy(t.parameters().params_flat());
  const StepStats s = t.train_step(b.x, b.y);
  CHECK(s.skipped);
  const auto after = host_copy(t.parameters().params_flat());
  CHECK(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)) == 0);
  CHECK(t.step() == 1);
}

TEST_CASE("more micro-batches than samples is refused with the numbers") {
  auto backend = make_cpu_backend(0, 1);
  Batch b(3);
  Model m = deep_mlp(1, 8, {1, 4, 4});
  Trainer t(m, *backend, config(4));
  CHECK_THROWS_WITH_AS(t.train_step(b.x, b.y), doctest::Contains("3 samples into 4 micro-batches"),
                       UsageError);
}

TEST_CASE("checkpoint: resume continues bit for bit") {
  auto backend = make_cpu_backend(0, 1);
  const Dataset train = test::synthetic_dataset(100, Shape{1, 4, 4}, 10, 5);
  const auto dir = temp_dir();
  FitOptions o;
  o.batch = 16;  // 7 batches per epoch, the last one smaller
  o.steps = 10;
  o.log_every = 1000;

  // Uninterrupted: 10 steps.
  Model ma = deep_mlp(2, 16, {1, 4, 4});
  TrainerConfig c = config(3);
  c.optimizer.kind = "adamw";
  c.optimizer.momentum = 0.f;
  Trainer ta(ma, *backend, c);
  fit(ta, train, nullptr, o);
  const auto full = host_copy(ta.parameters().params_flat());

  // Interrupted after 4 steps (mid-epoch), then resumed in a fresh trainer.
  Model mb = deep_mlp(2, 16, {1, 4, 4});
  Trainer tb(mb, *backend, c);
  FitOptions first = o;
  first.steps = 4;
  first.checkpoints.save = dir / "ckpt";
  fit(tb, train, nullptr, first);
  const auto saved = host_copy(tb.parameters().params_flat());

  Model mc = deep_mlp(2, 16, {1, 4, 4});
  Trainer tc(mc, *backend, c);
  const auto fresh = host_copy(tc.parameters().params_flat());
  REQUIRE(fresh.size() == saved.size());
  // Training moved the weights away from the initialisation: loading nothing would show.
  CHECK(std::memcmp(fresh.data(), saved.data(), saved.size() * sizeof(float)) != 0);
  FitOptions second = o;
  second.checkpoints.resume = first.checkpoints.save.string();
  second.checkpoints.save_init = dir / "after_resume";  // the state right after loading
  const FitResult r = fit(tc, train, nullptr, second);
  CHECK(r.steps == 6);  // it started at the saved step 4, not at 0
  CHECK(tc.step() == 10);
  const auto resumed = host_copy(tc.parameters().params_flat());
  CHECK(std::memcmp(full.data(), resumed.data(), full.size() * sizeof(float)) == 0);

  // Right after loading, the resumed run stood at the saved step and data position with the
  // saved weights.
  Model md = deep_mlp(2, 16, {1, 4, 4});
  Trainer td(md, *backend, c);
  StageState weights_only{&td.parameters(), nullptr};
  const TrainingState at_start =
      load_checkpoint(second.checkpoints.save_init, md, std::span(&weights_only, 1));
  CHECK(at_start.step == 4);
  CHECK(at_start.epoch == 0);
  CHECK(at_start.batch_in_epoch == 4);
  const auto loaded = host_copy(td.parameters().params_flat());
  CHECK(std::memcmp(loaded.data(), saved.data(), saved.size() * sizeof(float)) == 0);

  // Names follow "{layer}.{name}.{param}" and optimizer slots are stored beside them.
  // The piece is a plain safetensors file.
  const SafetensorsFile f = load_safetensors(first.checkpoints.save / "part-00000.safetensors");
  CHECK(f.find("1.linear.weight") != nullptr);
  CHECK(f.find("optimizer.1.linear.weight.exp_avg_sq") != nullptr);
  CHECK(read_manifest(first.checkpoints.save).meta("step") == "4");
  std::filesystem::remove_all(dir);
}

TEST_CASE("checkpoint: any 64-bit seed round-trips, 2^63 and 2^64 - 1 included") {
  auto backend = make_cpu_backend(0, 1);
  const Dataset train = test::synthetic_dataset(40, Shape{1, 4, 4}, 10, 5);
  const auto dir = temp_dir();
  for (const uint64_t seed : {uint64_t{1} << 63, std::numeric_limits<uint64_t>::max()}) {
    CAPTURE(seed);
    TrainerConfig c = config(1);
    c.seed = seed;
    FitOptions o;
    o.batch = 8;
    o.steps = 2;
    o.log_every = 1000;
    o.checkpoints.save = dir / "seed";
    Model m = deep_mlp(2, 16, {1, 4, 4});
    Trainer t(m, *backend, c);
    fit(t, train, nullptr, o);
    CHECK(read_manifest(o.checkpoints.save).meta("seed") == std::to_string(seed));

    Model m2 = deep_mlp(2, 16, {1, 4, 4});
    Trainer t2(m2, *backend, c);
    StageState s{&t2.parameters(), &t2.optimizer()};
    CHECK(load_checkpoint(o.checkpoints.save, m2, std::span(&s, 1)).seed == seed);

    // And fit resumes it: the seed it reads back is the run's seed.
    Model m3 = deep_mlp(2, 16, {1, 4, 4});
    Trainer t3(m3, *backend, c);
    FitOptions more = o;
    more.steps = 3;
    more.checkpoints.resume = o.checkpoints.save.string();
    more.checkpoints.save.clear();
    CHECK(fit(t3, train, nullptr, more).steps == 1);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("checkpoint: refuses another model, another optimizer and corrupt files") {
  auto backend = make_cpu_backend(0, 1);
  const auto dir = temp_dir();
  const auto path = dir / "a";
  Model m = deep_mlp(2, 16, {1, 4, 4});
  Trainer t(m, *backend, config(1));
  StageState s{&t.parameters(), &t.optimizer()};
  save_checkpoint(path, m, std::span(&s, 1), TrainingState{});

  // Another architecture: the message names the first differing layer.
  Model other = deep_mlp(2, 24, {1, 4, 4});
  Trainer to(other, *backend, config(1));
  StageState so{&to.parameters(), &to.optimizer()};
  CHECK_THROWS_WITH_AS(load_checkpoint(path, other, std::span(&so, 1)),
                       doctest::Contains("different model"), FileError);

  // Another optimizer.
  Model same = deep_mlp(2, 16, {1, 4, 4});
  TrainerConfig ac = config(1);
  ac.optimizer.kind = "adamw";
  ac.optimizer.momentum = 0.f;
  Trainer ta(same, *backend, ac);
  StageState sa{&ta.parameters(), &ta.optimizer()};
  CHECK_THROWS_WITH_AS(load_checkpoint(path, same, std::span(&sa, 1)),
                       doctest::Contains("--optim sgd"), FileError);

  // Truncated piece.
  const auto piece = path / "part-00000.safetensors";
  const auto size = std::filesystem::file_size(piece);
  std::filesystem::resize_file(piece, size / 2);
  CHECK_THROWS_WITH_AS(load_checkpoint(path, m, std::span(&s, 1)),
                       doctest::Contains("part-00000.safetensors"), FileError);

  // Not a safetensors file at all.
  { std::ofstream(dir / "junk.safetensors") << "hello, this is not a checkpoint"; }
  CHECK_THROWS_AS(load_checkpoint(dir / "junk.safetensors", m, std::span(&s, 1)), FileError);
  CHECK_THROWS_AS(load_checkpoint(dir / "missing.safetensors", m, std::span(&s, 1)), FileError);
  std::filesystem::remove_all(dir);
}
