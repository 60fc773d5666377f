// The checkpoint module (engine/checkpoint/): the folder format and its integrity checks, atomic
// replacement and the temporaries a crash leaves, numbered checkpoints, path checks, the
// collective save of several ranks (and a rank that fails), loading into every local replica,
// metrics that continue on resume, and the clean stop at SIGTERM.
#include <doctest/doctest.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/folders.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/run_checkpoints.h"
#include "engine/comm/in_process.h"
#include "engine/core/error.h"
#include "engine/io/crc32.h"
#include "engine/loop/fit.h"
#include "engine/process/preemption.h"
#include "engine/replicas/data_parallel_trainer.h"
#include "engine/report/metrics.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"
#include "synthetic.h"
#include "temp_dir.h"
#include "tests/comm/run_ranks.h"
#include "tests/pipeline/pipeline_test_util.h"

using namespace pt;
namespace fs = std::filesystem;

namespace {

Model small_model() { return deep_mlp(2, 16, {1, 4, 4}); }

TrainerConfig sgd_config(uint64_t seed = 7) {
  TrainerConfig c;
  c.seed = seed;
  c.optimizer.kind = "sgd";
  c.optimizer.lr = 0.05f;
  c.optimizer.momentum = 0.9f;
  c.lr = {LrSchedule::Kind::constant, 0.05f, 0, 0, 0.f};
  return c;
}

// Every parameter and optimizer slot of the stages, by checkpoint name, as raw bytes.
std::map<std::string, std::vector<char>> state_bytes(const std::vector<StageState>& stages) {
  std::map<std::string, std::vector<char>> out;
  auto take = [&](const std::string& name, const Tensor& t) {
    const char* p = static_cast<const char*>(t.data());
    out[name].assign(p, p + t.bytes());
  };
  for (const StageState& s : stages) {
    for (size_t i = 0; i < s.params->entries().size(); ++i)
      take(s.params->entries()[i].name, s.params->param(i));
    if (s.optimizer)
      for (const OptimizerSlot& slot : s.optimizer->slots())
        for (size_t i = 0; i < s.params->entries().size(); ++i)
          take("optimizer." + s.params->entries()[i].name + "." + slot.name,
               slot.state.view(s.params->entries()[i].table_index));
  }
  return out;
}

// A trainer that has taken a few steps (non-zero momentum), for a checkpoint worth comparing.
struct Trained {
  std::unique_ptr<Backend> backend = make_cpu_backend(0, 1);
  Model model = small_model();
  Trainer trainer{model, *backend, sgd_config()};
  explicit Trained(int steps = 2) {
    Dataset d = test::synthetic_dataset(16, Shape{1, 4, 4}, 10, 3);
    const Tensor x = Tensor::borrow(d.inputs.data(), d.sample_shape.with_batch(16));
    const Tensor y = Tensor::borrow(d.labels.data(), Shape{16}, DType::i32);
    for (int i = 0; i < steps; ++i) trainer.train_step(x, y);
  }
  StageState state() { return {&trainer.parameters(), &trainer.optimizer()}; }
};

TrainingState at_step(int64_t step, uint64_t seed = 7) {
  TrainingState s;
  s.step = step;
  s.seed = seed;
  return s;
}

void save(const fs::path& path, Trained& t, int64_t step) {
  const StageState s = t.state();
  save_checkpoint(path, t.model, std::span(&s, 1), at_step(step));
}

// The message `f` throws as E (fails the test when it throws nothing or something else).
template <typename E, typename F>
std::string message_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an exception");
  return "";
}

std::vector<std::string> hidden_temporaries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) out.push_back(name);
  }
  return out;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

// ---- format and integrity ----------------------------------------------------------------------

TEST_CASE("checkpoint: a save/load round trip restores every byte; the manifest lists them") {
  test::TempDir dir("pipetrain-ckpt");
  const fs::path path = dir.path / "ck";
  Trained a(3);
  save(path, a, 3);
  CHECK(is_checkpoint(path));
  CHECK(fs::exists(path / "part-00000.safetensors"));

  const auto saved = state_bytes({a.state()});
  const CheckpointManifest m = read_manifest(path);
  CHECK(m.meta("step") == "3");
  REQUIRE(m.pieces.size() == 1);
  CHECK(m.pieces[0].bytes == fs::file_size(path / m.pieces[0].file));
  CHECK(m.tensors.size() == saved.size());
  for (const auto& item : saved) {
    const auto& name = std::get<0>(item);
    const auto& bytes = std::get<1>(item);
    CAPTURE(name);
    const CheckpointTensor* t = m.find(name);
    REQUIRE(t != nullptr);
    CHECK(t->bytes == bytes.size());
    CHECK(t->crc32 == crc32_of(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
  }
  CHECK(verify_checkpoint(path).empty());

  Trained b(0);  // fresh weights, zero momentum
  CHECK(state_bytes({b.state()}) != saved);
  const StageState sb = b.state();
  const TrainingState st = load_checkpoint(path, b.model, std::span(&sb, 1));
  CHECK(st.step == 3);
  CHECK(st.seed == 7);
  CHECK(state_bytes({b.state()}) == saved);
}

TEST_CASE("checkpoint: a flipped byte, a truncated piece and a missing piece are named") {
  test::TempDir dir("pipetrain-ckpt");
  const fs::path path = dir.path / "ck";
  Trained a;
  save(path, a, 2);
  const CheckpointManifest m = read_manifest(path);
  const fs::path piece = path / "part-00000.safetensors";
  Trained b(0);
  const StageState sb = b.state();

  SUBCASE("one flipped byte") {
    const CheckpointTensor& t = m.tensors.at(1);
    {
      std::fstream f(piece, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(static_cast<std::streamoff>(t.offset + 3));
      char c = 0;
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x10);
      f.seekp(static_cast<std::streamoff>(t.offset + 3));
      f.write(&c, 1);
    }
    const std::string msg =
        message_of<FileError>([&] { load_checkpoint(path, b.model, std::span(&sb, 1)); });
    CHECK(msg.find("part-00000.safetensors") != std::string::npos);
    CHECK(msg.find("'" + t.name + "'") != std::string::npos);
    CHECK(msg.find("corrupt") != std::string::npos);
    const std::vector<std::string> problems = verify_checkpoint(path);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].find(t.name) != std::string::npos);
  }
  SUBCASE("a truncated piece") {
    fs::resize_file(piece, fs::file_size(piece) / 2);
    const std::string msg =
        message_of<FileError>([&] { load_checkpoint(path, b.model, std::span(&sb, 1)); });
    CHECK(msg.find("part-00000.safetensors") != std::string::npos);
    CHECK(msg.find("truncated") != std::string::npos);
    CHECK(!verify_checkpoint(path).empty());
  }
  SUBCASE("a missing piece") {
    fs::remove(piece);
    const std::string msg =
        message_of<FileError>([&] { load_checkpoint(path, b.model, std::span(&sb, 1)); });
    CHECK(msg.find("part-00000.safetensors") != std::string::npos);
    CHECK(msg.find("missing") != std::string::npos);
    const std::vector<std::string> problems = verify_checkpoint(path);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].find("missing") != std::string::npos);
  }
  SUBCASE("no manifest: not a checkpoint, or an interrupted write") {
    fs::remove(path / kManifestName);
    CHECK(!is_checkpoint(path));
    const std::string msg =
        message_of<FileError>([&] { load_checkpoint(path, b.model, std::span(&sb, 1)); });
    CHECK(msg.find("not a checkpoint") != std::string::npos);
    CHECK(msg.find("interrupted") != std::string::npos);
    CHECK_THROWS_AS(verify_checkpoint(path), FileError);
  }
  SUBCASE("a plain file given as the checkpoint") {
    write_text(dir.path / "weights.safetensors", "not a folder");
    const std::string msg = message_of<FileError>(
        [&] { load_checkpoint(dir.path / "weights.safetensors", b.model, std::span(&sb, 1)); });
    CHECK(msg.find("is a file, not a checkpoint folder") != std::string::npos);
  }
}

// Found by tests/fuzz/manifest_fuzz.cpp: numbers that nlohmann converts silently (a float piece
// index was undefined behaviour, a shape whose byte count overflows int64 too) are refused, as
// are negative sizes and a CRC beyond 32 bits.
TEST_CASE("checkpoint: manifest numbers out of range are refused with FileError") {
  test::TempDir dir("pipetrain-ckpt");
  auto manifest_with = [&](const std::string& tensor_fields) {
    write_text(dir.path / kManifestName,
               R"({"format": "pipetrain-checkpoint-2", "metadata": {}, "layout": {},
                   "pieces": [{"file": "part-00000.safetensors", "bytes": 64, "world_rank": 0}],
                   "tensors": [{"name": "w", "dtype": "F32", "offset": 8, )" +
                   tensor_fields + "}]}");
    return message_of<FileError>([&] { read_manifest(dir.path); });
  };
  CHECK(manifest_with(R"("piece": 1e300, "shape": [2], "bytes": 8, "crc32": 0)")
            .find("\"piece\" is 1e+300, expected an integer from 0 to") != std::string::npos);
  CHECK(manifest_with(R"("piece": 0, "shape": [4294967296, 4294967296, 16], "bytes": 0,
                         "crc32": 0)")
            .find("bytes fit in 64 bits") != std::string::npos);
  CHECK(manifest_with(R"("piece": 0, "shape": [-2, -2], "bytes": 16, "crc32": 0)")
            .find("shape [-2,-2] is not a list of sizes") != std::string::npos);
  CHECK(manifest_with(R"("piece": 0, "shape": [1, 1, 1, 1, 1, 1, 1], "bytes": 4, "crc32": 0)")
            .find("at most 6 sizes") != std::string::npos);
  CHECK(manifest_with(R"("piece": 0, "shape": [2], "bytes": 8, "crc32": 4294967296)")
            .find("\"crc32\" is 4294967296") != std::string::npos);
  CHECK(manifest_with(R"("piece": 0, "shape": [2], "bytes": 8.5, "crc32": 0)")
            .find("\"bytes\" is 8.5") != std::string::npos);
  // An integer literal beyond 64 bits parses as a float: the piece's size too.
  write_text(dir.path / kManifestName,
             R"({"format": "pipetrain-checkpoint-2", "metadata": {}, "layout": {},
                 "pieces": [{"file": "part-00000.safetensors", "world_rank": 0,
                             "bytes": 317888888888888888888888888888888805080}],
                 "tensors": []})");
  CHECK(message_of<FileError>([&] {
          read_manifest(dir.path);
        }).find("piece part-00000.safetensors: \"bytes\" is 3.178888888888889e+38") !=
        std::string::npos);
  // The same tensor with sound numbers loads.
  write_text(dir.path / kManifestName,
             R"({"format": "pipetrain-checkpoint-2", "metadata": {}, "layout": {},
                 "pieces": [{"file": "part-00000.safetensors", "bytes": 64, "world_rank": 0}],
                 "tensors": [{"name": "w", "dtype": "F32", "offset": 8, "piece": 0,
                              "shape": [2], "bytes": 8, "crc32": 7}]})");
  CHECK(read_manifest(dir.path).tensors.at(0).crc32 == 7);
}

// ---- atomic replacement and temporaries ---------------------------------------------------------

TEST_CASE("checkpoint: saving over a checkpoint replaces it and leaves no temporary") {
  test::TempDir dir("pipetrain-ckpt");
  const fs::path path = dir.path / "ck";
  Trained a;
  save(path, a, 2);
  save(path, a, 5);
  CHECK(read_manifest(path).meta("step") == "5");
  CHECK(verify_checkpoint(path).empty());
  CHECK(hidden_temporaries(dir.path).empty());
}

TEST_CASE("checkpoint: RunCheckpoints removes the temporaries a crash left, and nothing else") {
  test::TempDir dir("pipetrain-ckpt");
  const fs::path crashed = dir.path / ".ckpt.tmp.123.0";
  const fs::path other = dir.path / ".other.tmp.123.0";    // another target's: not ours
  const fs::path lookalike = dir.path / "ckpt.tmp.123.0";  // not hidden: not a temporary
  for (const fs::path& p : {crashed, other, lookalike}) {
    fs::create_directories(p);
    write_text(p / "part-00000.safetensors", "junk");
  }
  CheckpointOptions o;
  o.save = dir.path / "ckpt";
  RunCheckpoints run(o, nullptr);
  CHECK(!fs::exists(crashed));
  CHECK(fs::exists(other));
  CHECK(fs::exists(lookalike));
}

// ---- numbered checkpoints -----------------------------------------------------------------------

TEST_CASE("checkpoint: numbered checkpoints, --keep and --resume latest:") {
  test::TempDir dir("pipetrain-ckpt");
  const fs::path runs = dir.path / "runs";
  fs::create_directories(runs);
  CHECK_THROWS_WITH_AS(resolve_resume("latest:" + runs.string()),
                       doctest::Contains("holds no complete numbered checkpoint"), UsageError);
  Trained a;
  for (int64_t step : {10, 20, 30}) save(numbered_checkpoint(runs, step), a, step);
  // An interrupted one (no manifest) with a higher step: not counted, not picked.
  fs::create_directories(numbered_checkpoint(runs, 40));
  write_text(numbered_checkpoint(runs, 40) / "part-00000.safetensors", "junk");

  const std::vector<fs::path> all = numbered_checkpoints(runs);
  REQUIRE(all.size() == 3);
  CHECK(all.front().filename() == "step-00000010");
  CHECK(all.back().filename() == "step-00000030");
  CHECK(resolve_resume("latest:" + runs.string()) == numbered_checkpoint(runs, 30));
  CHECK(resolve_resume((runs / "step-00000010").string()) == runs / "step-00000010");

  keep_newest(runs, 2);
  const std::vector<fs::path> kept = numbered_checkpoints(runs);
  REQUIRE(kept.size() == 2);
  CHECK(kept[0] == numbered_checkpoint(runs, 20));
  CHECK(kept[1] == numbered_checkpoint(runs, 30));
  CHECK(!fs::exists(numbered_checkpoint(runs, 10)));
}

TEST_CASE("checkpoint: check_checkpoint_path") {
  test::TempDir dir("pipetrain-ckpt");
  write_text(dir.path / "file", "x");
  fs::create_directories(dir.path / "plain");
  Trained a;
  save(dir.path / "ck", a, 1);

  CHECK_THROWS_WITH_AS(check_checkpoint_path(dir.path / "file", "--save"),
                       doctest::Contains("it exists and is not a folder"), UsageError);
  CHECK_THROWS_WITH_AS(check_checkpoint_path(dir.path / "plain", "--save"),
                       doctest::Contains("it is a folder but not a checkpoint"), UsageError);
  // Missing folders above it are created when it is written; a file in their way is refused.
  CHECK_NOTHROW(check_checkpoint_path(dir.path / "nowhere" / "ck", "--save"));
  const std::string in_the_way = (dir.path / "file").string() + " is a regular file, not a folder";
  CHECK_THROWS_WITH_AS(check_checkpoint_path(dir.path / "file" / "sub" / "ck", "--save"),
                       doctest::Contains(in_the_way.c_str()), UsageError);
  CHECK_NOTHROW(check_checkpoint_path(dir.path / "ck", "--save"));
  CHECK_NOTHROW(check_checkpoint_path(dir.path / "new", "--save"));
  // Numbered: a plain folder is where they go; a checkpoint itself is not.
  CHECK_NOTHROW(check_checkpoint_path(dir.path / "plain", "--save", true));
  CHECK_THROWS_WITH_AS(check_checkpoint_path(dir.path / "ck", "--save", true),
                       doctest::Contains("it is a checkpoint itself"), UsageError);
}

// ---- collective save ----------------------------------------------------------------------------

TEST_CASE("checkpoint: two ranks save one stage each; a single device loads both (S=2 -> S=1)") {
  test::TempDir dir("pipetrain-ckpt");
  const fs::path path = dir.path / "ck";
  test::CpuDevices devices(2);
  Model model = small_model();
  TrainerConfig two_microbatches = sgd_config();
  two_microbatches.microbatches = 2;
  PipelineTrainer pipeline(model, devices.devices,
                           test::pipeline_config(model, two_microbatches, "1f1b", 2, 2));
  Dataset d = test::synthetic_dataset(16, Shape{1, 4, 4}, 10, 3);
  const Tensor x = Tensor::borrow(d.inputs.data(), d.sample_shape.with_batch(16));
  const Tensor y = Tensor::borrow(d.labels.data(), Shape{16}, DType::i32);
  pipeline.train_step(x, y);
  pipeline.train_step(x, y);
  const std::vector<StageState> stages = pipeline.stage_states();
  REQUIRE(stages.size() == 2);

  test::Group world = make_in_process_group(2, 20, "checkpoint test");
  test::rethrow_first(test::run_ranks(world, [&](Communicator& comm) {
    const StageState mine = stages[static_cast<size_t>(comm.rank())];
    save_checkpoint(path, model, std::span(&mine, 1), at_step(2), &comm);
  }));
  const CheckpointManifest m = read_manifest(path);
  REQUIRE(m.pieces.size() == 2);
  CHECK(m.pieces[0].file == "part-00000.safetensors");
  CHECK(m.pieces[1].file == "part-00001.safetensors");
  CHECK(verify_checkpoint(path).empty());

  auto backend = make_cpu_backend(0, 1);
  Model single = small_model();
  Trainer reference(single, *backend, sgd_config());
  const StageState s{&reference.parameters(), &reference.optimizer()};
  CHECK(load_checkpoint(path, single, std::span(&s, 1)).step == 2);
  CHECK(state_bytes({s}) == state_bytes(stages));

  SUBCASE("a rank whose write fails makes every rank throw; the previous checkpoint stays") {
    // Rank 1's optimizer state has no entries for its parameters: writing its piece throws.
    Optimizer broken(sgd_config().optimizer, *devices.devices[1], SizeTable{});
    const std::vector<std::string> errors = [&] {
      std::vector<std::string> out;
      for (const auto& e : test::run_ranks(world, [&](Communicator& comm) {
             StageState mine = stages[static_cast<size_t>(comm.rank())];
             if (comm.rank() == 1) mine.optimizer = &broken;
             save_checkpoint(path, model, std::span(&mine, 1), at_step(3), &comm);
           }))
        out.push_back(test::message_of(e));
      return out;
    }();
    REQUIRE(errors.size() == 2);
    CHECK(errors[0].find("world rank 1 could not write its piece") != std::string::npos);
    CHECK(!errors[1].empty());
    CHECK(read_manifest(path).meta("step") == "2");
    CHECK(verify_checkpoint(path).empty());
    CHECK(hidden_temporaries(dir.path).empty());
  }
}

TEST_CASE("checkpoint: resume fills every local replica of a data-parallel trainer") {
  test::TempDir dir("pipetrain-ckpt");
  const fs::path path = dir.path / "ck";
  Trained a(3);
  save(path, a, 3);
  const auto saved = state_bytes({a.state()});

  test::CpuDevices devices(2);
  const auto make = [] { return small_model(); };
  PipelineConfig pc = test::pipeline_config(make(), sgd_config(), "1f1b", 1, 1);
  auto trainer = make_local_data_parallel(make, devices.devices, pc, 2);
  REQUIRE(trainer->local_replicas() == 2);
  CHECK(state_bytes(trainer->replica(1).stage_states()) != saved);

  CheckpointOptions o;
  o.resume = path.string();
  RunCheckpoints run(o, nullptr);
  REQUIRE(run.resume(*trainer).has_value());
  CHECK(trainer->step() == 3);
  CHECK(state_bytes(trainer->replica(0).stage_states()) == saved);
  CHECK(state_bytes(trainer->replica(1).stage_states()) == saved);
  CHECK(trainer->replica(1).step() == 3);
}

// ---- metrics on resume --------------------------------------------------------------------------

TEST_CASE("checkpoint: MetricsWriter continues a resumed run's file") {
  test::TempDir dir("pipetrain-ckpt");
  const fs::path path = dir.path / "m.jsonl";
  {
    MetricsWriter w(path);
    for (int64_t step = 1; step <= 5; ++step) w.write({{"step", step}, {"loss", 1.0}});
    w.write({{"event", std::string("note")}});  // no step: kept
  }
  {
    MetricsWriter w(path, 3);  // resumed from the checkpoint of step 3
    w.write({{"step", int64_t{4}}, {"loss", 0.5}});
  }
  auto line = [](int64_t step, double loss) { return json_line({{"step", step}, {"loss", loss}}); };
  CHECK(read_text(path) == line(1, 1.0) + "\n" + line(2, 1.0) + "\n" + line(3, 1.0) + "\n" +
                               json_line({{"event", std::string("note")}}) + "\n" + line(4, 0.5) +
                               "\n");
  {
    MetricsWriter w(path);  // a new run starts the file again
    w.write({{"step", int64_t{1}}, {"loss", 2.0}});
  }
  CHECK(read_text(path) == line(1, 2.0) + "\n");
}

// ---- stopping at SIGTERM ------------------------------------------------------------------------

TEST_CASE("checkpoint: PreemptionWatch sees SIGTERM") {
  PreemptionWatch watch;
  CHECK(!watch.requested(nullptr));
  std::raise(SIGTERM);
  CHECK(watch.requested(nullptr));
  CHECK(std::string(watch.which()) == "SIGTERM");
}

namespace {

// A trainer that receives SIGTERM during its first step, as a job does when the scheduler
// preempts it.
class SignalledTrainer final : public TrainingEngine {
 public:
  explicit SignalledTrainer(Trainer& inner) : inner_(inner) {}
  StepStats train_step(const Tensor& inputs, const Tensor& targets) override {
    if (!raised_) {
      raised_ = true;
      std::raise(SIGTERM);
    }
    return inner_.train_step(inputs, targets);
  }
  EvalStats evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk) override {
    return inner_.evaluate(inputs, targets, chunk);
  }
  Model& model() const override { return inner_.model(); }
  uint64_t seed() const override { return inner_.seed(); }
  int64_t step() const override { return inner_.step(); }
  void set_step(int64_t step) override { inner_.set_step(step); }
  std::vector<StageState> stage_states() override { return inner_.stage_states(); }

 private:
  Trainer& inner_;
  bool raised_ = false;
};

}  // namespace

TEST_CASE("checkpoint: fit() stops after the step in which SIGTERM arrived and saves it") {
  test::TempDir dir("pipetrain-ckpt");
  auto backend = make_cpu_backend(0, 1);
  Model model = small_model();
  Trainer inner(model, *backend, sgd_config());
  SignalledTrainer trainer(inner);
  const Dataset train = test::synthetic_dataset(64, Shape{1, 4, 4}, 10, 5);
  FitOptions o;
  o.batch = 8;
  o.steps = 6;
  o.log_every = 1000;
  o.checkpoints.save = dir.path / "ck";
  const FitResult r = fit(trainer, train, nullptr, o);
  REQUIRE(r.preempted != nullptr);
  CHECK(std::string(r.preempted) == "SIGTERM");
  CHECK(r.steps == 1);
  CHECK(trainer.step() == 1);
  REQUIRE(is_checkpoint(o.checkpoints.save));
  CHECK(read_manifest(o.checkpoints.save).meta("step") == "1");
}

// ---- what a checkpoint says is checked, not trusted --------------------------------------------

TEST_CASE("checkpoint: impossible metadata, unknown tensors and non-finite values are refused") {
  const test::TempDir dir("pipetrain-ckpt");
  Trained t;
  const fs::path path = dir.path / "ck";
  save(path, t, 2);
  Trained fresh(0);
  const auto before = state_bytes({fresh.state()});
  const StageState into = fresh.state();
  auto refuse = [&](const std::string& edit_from, const std::string& edit_to) {
    const std::string good = read_text(path / kManifestName);
    std::string bad = good;
    const auto at = bad.find(edit_from);
    REQUIRE(at != std::string::npos);
    bad.replace(at, edit_from.size(), edit_to);
    write_text(path / kManifestName, bad);
    const std::string msg =
        message_of<FileError>([&] { load_checkpoint(path, fresh.model, std::span(&into, 1)); });
    write_text(path / kManifestName, good);
    // Refused before anything was loaded: the run's parameters are untouched.
    CHECK(state_bytes({fresh.state()}) == before);
    return msg;
  };
  CHECK(refuse("\"step\": \"2\"", "\"step\": \"-999\"").find("'step' is -999") !=
        std::string::npos);
  CHECK(refuse("\"epoch\": \"0\"", "\"epoch\": \"-1\"").find("'epoch' is -1") != std::string::npos);
  CHECK(refuse("\"optimizer_steps\": \"2\"", "\"optimizer_steps\": \"3\"")
            .find("'optimizer_steps' is 3 but the step is 2") != std::string::npos);
  CHECK(refuse("\"name\": \"1.linear.bias\"", "\"name\": \"1.linear.bogus\"")
            .find("holds tensor '1.linear.bogus', which is no parameter of this model") !=
        std::string::npos);
  CHECK(refuse("momentum_buffer\"", "exp_avg\"").find("nor state of its optimizer 'sgd'") !=
        std::string::npos);
  // The checkpoint itself is still good.
  CHECK_NOTHROW(load_checkpoint(path, fresh.model, std::span(&into, 1)));

  // A NaN written by a diverged run: refused, naming the tensor and the element.
  Trained diverged;
  const Tensor w = diverged.trainer.parameters().param(0);
  w.f32()[5] = std::numeric_limits<float>::quiet_NaN();
  const fs::path nan_path = dir.path / "nan";
  save(nan_path, diverged, 2);
  Trained other(0);
  const StageState other_state = other.state();
  const std::string msg = message_of<FileError>(
      [&] { load_checkpoint(nan_path, other.model, std::span(&other_state, 1)); });
  CHECK(msg.find("tensor '" + diverged.trainer.parameters().entries()[0].name +
                 "' holds nan at element 5") != std::string::npos);
}
