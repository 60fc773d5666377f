// bench/checkpoint: how long saving and loading a checkpoint takes, per MiB and per process, for a
// model laid out as S stages x R replicas, in one process or one process per device under mpirun
// (`mpirun -np 4 pipetrain-bench-checkpoint --stages 2 --dp 2`). The model is deep_mlp(--layers,
// --width) trained with SGD momentum 0.9 (weights + one optimizer slot: ~166 MiB by default),
// its stage states built by make_training exactly as a training program builds them.
//
// Prints JSON lines (world rank 0 only):
//   {"bench":"checkpoint_config", "model", "layers", "width", "parameters", "optimizer", "dir",
//    "processes", "stages", "replicas", "problems"}
//       problems = what verify_checkpoint found wrong with the verification save, plus 1 when the
//       verification load did not give back the saved state (each copy's first weight is zeroed
//       and must come back bit for bit). 0: the timed figures are of a whole checkpoint that loads
//   {"bench":"checkpoint_save", "processes":P, "writers":W, "stages":S, "replicas":R,
//    "total_mib", "mib_per_writer", "max_mib_per_writer", "median_s", "min_s", "max_s",
//    "mib_per_s_per_writer", "ms_per_mib_per_writer", "reps", "page_cache":"warm"}
//   {"bench":"checkpoint_load", "processes", "readers", ... the same fields per reader}
//
// Save: one save_checkpoint (collective) to DIR/ckpt, replacing the previous one (rank 0 writes
// the new folder next to it and exchanges the two atomically, then removes the old one). Each
// writer (a process holding replica 0 of some stages) writes its piece and fsyncs it; the time is
// the whole call, from the start to the committed checkpoint. Load: every process reads its own
// stages (every copy it holds) back with load_checkpoint, CRC-checking every tensor.
//   A rep's time is the slowest process's (the others wait for it: that is the collective cost);
//   reported are the median, min and max over reps.
//   mib_per_writer = total_mib / W (the mean piece); mib_per_s_per_writer = mib_per_writer /
//   median_s; ms_per_mib_per_writer is its inverse, in ms. MiB = 2^20 bytes.
//   page_cache "warm": caches are not dropped (a CI machine cannot), so loads read what the saves
//   just wrote from memory; the save figure is still honest, as it includes fsync of every piece.
// Timing follows nccl-tests: verify once, warm up once, then --reps timed calls, each started
// after a barrier.
// Exits 3 when the verification found problems, 2 on bad flags, 1 on any other failure.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/positive.h"
#include "bench/synthetic_batch.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/manifest.h"
#include "engine/core/error.h"
#include "engine/setup/run_main.h"
#include "engine/setup/training_run.h"
#include "layers/zoo.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using pt::bench::emit;

constexpr double kMiB = 1024.0 * 1024.0;

struct Flags {
  int64_t width = 2560;  // 4 hidden layers: 21.7 M parameters, 166 MiB with momentum
  int layers = 4;
  int stages = 1;
  int dp = 0;  // 0: 1, or under mpirun the processes divided by the stages
  int reps = 5;
  std::string dir;  // empty: a temporary folder under /tmp, removed at the end
  bool quick = false;
  double timeout = 600;
};

// ---- collective helpers (world may be null: one process) ---------------------------------------

// Every process's `mine` (the same length everywhere), process after process.
template <class T>
std::vector<T> gather(pt::Communicator* world, const std::vector<T>& mine, const char* what) {
  if (!world) return mine;
  std::vector<T> all(mine.size() * static_cast<size_t>(world->size()));
  world->all_gather(mine.data(), all.data(), mine.size() * sizeof(T), what);
  return all;
}

void barrier(pt::Communicator* world, const char* what) {
  if (world) world->barrier(what);
}

// Rank 0's folder name, on every process.
std::string broadcast_path(pt::Communicator* world, const std::string& path) {
  if (!world) return path;
  std::array<char, 4096> buffer{};
  if (path.size() >= buffer.size())
    throw pt::UsageError(fmt::format("--dir is {} characters long: use a path shorter than {}",
                                     path.size(), buffer.size()));
  std::memcpy(buffer.data(), path.data(), path.size());
  world->broadcast(buffer.data(), buffer.size(), 0, "the benchmark's folder");
  return std::string(buffer.data());
}

// ---- what one process holds ---------------------------------------------------------------------

// The bytes of weights and optimizer state in `stages` (what a save writes or a load reads,
// without the safetensors headers).
uint64_t state_bytes(const std::vector<pt::StageState>& stages) {
  uint64_t bytes = 0;
  for (const pt::StageState& s : stages) {
    const auto& entries = s.params->entries();
    for (size_t i = 0; i < entries.size(); ++i) {
      bytes += s.params->param(i).bytes();
      if (s.optimizer)
        for (const pt::OptimizerSlot& slot : s.optimizer->slots())
          bytes += slot.state.view(entries[i].table_index).bytes();
    }
  }
  return bytes;
}

// ---- timing -------------------------------------------------------------------------------------

struct Timing {
  std::vector<double> slowest;  // per rep: the slowest process's seconds
  double median = 0, min = 0, max = 0;
};

// Runs `call` reps times, each after a barrier, and gathers every process's seconds.
template <class F>
Timing time_reps(pt::Communicator* world, int reps, F&& call) {
  std::vector<double> mine(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    barrier(world, "the start of a timed checkpoint call");
    const auto t0 = Clock::now();
    call();
    mine[static_cast<size_t>(i)] = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const std::vector<double> all = gather(world, mine, "the checkpoint calls' times");
  const size_t P = all.size() / mine.size();
  Timing t;
  for (size_t i = 0; i < mine.size(); ++i) {
    double slowest = 0;
    for (size_t p = 0; p < P; ++p) slowest = std::max(slowest, all[p * mine.size() + i]);
    t.slowest.push_back(slowest);
  }
  std::vector<double> sorted = t.slowest;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  t.median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  t.min = sorted.front();
  t.max = sorted.back();
  return t;
}

// One checkpoint_save / checkpoint_load line. `bytes`: every process's bytes written or read;
// `who`: "writer" or "reader" (a process that moved any).
void emit_timing(const std::string& bench, const std::string& who,
                 const std::vector<uint64_t>& bytes, int S, int R, const Timing& t) {
  int64_t movers = 0;
  uint64_t total = 0, largest = 0;
  for (uint64_t b : bytes) {
    movers += b > 0;
    total += b;
    largest = std::max(largest, b);
  }
  const double total_mib = static_cast<double>(total) / kMiB;
  const double per_mover = movers ? total_mib / static_cast<double>(movers) : 0;
  emit({{"bench", bench},
        {"processes", static_cast<int64_t>(bytes.size())},
        {who + "s", movers},
        {"stages", int64_t{S}},
        {"replicas", int64_t{R}},
        {"total_mib", total_mib},
        {"mib_per_" + who, per_mover},
        {"max_mib_per_" + who, static_cast<double>(largest) / kMiB},
        {"median_s", t.median},
        {"min_s", t.min},
        {"max_s", t.max},
        {"mib_per_s_per_" + who, per_mover / t.median},
        {"ms_per_mib_per_" + who, per_mover > 0 ? t.median * 1e3 / per_mover : 0.0},
        {"reps", static_cast<int64_t>(t.slowest.size())},
        {"page_cache", std::string("warm")}});
}

// Zeroes the first weight of every copy, loads `ckpt` into them and counts the copies whose
// weight did not come back bit for bit (the load really wrote the state it reports).
int64_t wrong_loads(const fs::path& ckpt, const pt::Model& model,
                    const std::vector<pt::StageState>& copies, const pt::TrainingState& saved) {
  std::vector<std::vector<std::byte>> before;
  for (const pt::StageState& s : copies) {
    const pt::Tensor w = s.params->param(0);
    before.emplace_back(w.bytes());
    s.params->backend().copy_to_host(before.back().data(), w.data(), w.bytes());
    const std::vector<std::byte> zeros(w.bytes());
    s.params->backend().copy_from_host(w.data(), zeros.data(), w.bytes());
  }
  const pt::TrainingState loaded = pt::load_checkpoint(ckpt, model, copies);
  int64_t wrong = loaded.step != saved.step || loaded.seed != saved.seed;
  for (size_t c = 0; c < copies.size(); ++c) {
    const pt::Tensor w = copies[c].params->param(0);
    std::vector<std::byte> after(w.bytes());
    copies[c].params->backend().copy_to_host(after.data(), w.data(), w.bytes());
    wrong += after != before[c];
  }
  return wrong;
}

// ---- the benchmark ------------------------------------------------------------------------------

int run(Flags f, pt::Communicator* world) {
  const int P = world ? world->size() : 1;
  const int S = f.stages;
  const int R = f.dp > 0 ? f.dp : (world ? P / S : 1);
  if (world && S * R != P)
    throw pt::UsageError(fmt::format(
        "mpirun -np {} runs one process per stage and replica, but --stages {} x --dp {} = {}: "
        "use -np {} or other --stages/--dp",
        P, S, R, S * R, S * R));

  // The folder: rank 0 makes it (or a temporary one), everyone uses rank 0's name.
  std::string dir = f.dir;
  const bool temporary = dir.empty();
  if (pt::speaks(world)) {
    if (temporary) {
      std::string pattern =
          (fs::temp_directory_path() / "pipetrain-bench-checkpoint-XXXXXX").string();
      if (!::mkdtemp(pattern.data()))
        throw pt::FileError(fmt::format("cannot create a temporary folder {}", pattern));
      dir = pattern;
    } else {
      fs::create_directories(dir);
    }
  }
  dir = broadcast_path(world, dir);
  struct RemoveAtEnd {
    bool active;
    fs::path path;
    ~RemoveAtEnd() {
      std::error_code ec;
      if (active) fs::remove_all(path, ec);
    }
  } remove_at_end{temporary && pt::speaks(world), dir};
  const fs::path ckpt = fs::path(dir) / "ckpt";

  // The engine: S stages x R replicas, SGD with momentum (one optimizer slot).
  const auto make_model = [&] { return pt::deep_mlp(f.layers, f.width); };
  pt::Model model = make_model();
  pt::TrainingOptions opt;
  opt.devices = world ? "auto" : fmt::format("cpu:0..{}", S * R - 1);
  opt.threads = 1;
  opt.stages = S;
  opt.dp = R;
  opt.print = false;
  opt.timeout_s = f.timeout;
  const pt::TrainerConfig config = pt::bench::sgd_config(1);
  pt::TrainingRun training = pt::make_training(opt, model, make_model, config, 8 * R, world);
  pt::TrainingEngine& engine = *training.engine;
  const std::vector<pt::StageState> to_save = engine.stages_to_save();
  const std::vector<pt::StageState> copies = engine.all_stage_copies();
  pt::TrainingState state;
  state.step = 12;
  state.seed = engine.seed();
  state.layout = training.layout;

  // 1. Verify: one save, checked by rank 0, and one load that must give the state back.
  pt::save_checkpoint(ckpt, model, to_save, state, world);
  int64_t problems = 0;
  if (pt::speaks(world)) problems = static_cast<int64_t>(pt::verify_checkpoint(ckpt).size());
  int64_t wrong = wrong_loads(ckpt, model, copies, state);
  if (world) {
    world->all_reduce(&problems, 1, pt::ElemType::i64, pt::ReduceOp::sum, "problems");
    world->all_reduce(&wrong, 1, pt::ElemType::i64, pt::ReduceOp::sum, "wrong loads");
  }
  problems += wrong > 0 ? 1 : 0;
  if (pt::speaks(world))
    emit({{"bench", std::string("checkpoint_config")},
          {"model", std::string("deep_mlp")},
          {"layers", int64_t{f.layers}},
          {"width", f.width},
          {"parameters", model.param_count()},
          {"optimizer", config.optimizer.str()},
          {"dir", dir},
          {"processes", int64_t{P}},
          {"stages", int64_t{S}},
          {"replicas", int64_t{R}},
          {"problems", problems}});

  // 2. Warm up once each, then the timed saves (each replacing the last) and loads.
  pt::save_checkpoint(ckpt, model, to_save, state, world);
  pt::load_checkpoint(ckpt, model, copies);
  uint64_t piece_bytes = 0;
  const Timing save = time_reps(world, f.reps, [&] {
    piece_bytes = pt::save_checkpoint(ckpt, model, to_save, state, world).bytes;
  });
  const Timing load = time_reps(world, f.reps, [&] { pt::load_checkpoint(ckpt, model, copies); });
  const std::vector<uint64_t> written =
      gather(world, std::vector{piece_bytes}, "the pieces' sizes");
  const std::vector<uint64_t> read =
      gather(world, std::vector{state_bytes(copies)}, "the bytes each process loads");
  if (pt::speaks(world)) {
    emit_timing("checkpoint_save", "writer", written, S, R, save);
    emit_timing("checkpoint_load", "reader", read, S, R, load);
  }
  barrier(world, "the end of the benchmark");  // nobody reads while rank 0 removes the folder
  return problems ? 3 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"checkpoint save and load time per MiB and per process"};
  Flags f;
  app.add_option("--width", f.width, "MLP width (default 2560: ~166 MiB with momentum)")
      ->check(pt::bench::kPositive);
  app.add_option("--layers", f.layers, "hidden layers of the MLP")->check(pt::bench::kPositive);
  app.add_option("--stages", f.stages, "pipeline stages S")->check(pt::bench::kPositive);
  app.add_option("--dp", f.dp, "replicas R (default 1; under mpirun: processes / stages)")
      ->check(pt::bench::kPositive);
  app.add_option("--reps", f.reps, "timed saves and loads")->check(pt::bench::kPositive);
  app.add_option("--dir", f.dir,
                 "folder for the checkpoint DIR/ckpt, left there (default: a temporary folder "
                 "under /tmp, removed at the end)");
  app.add_flag("--quick", f.quick, "a tiny model and 2 reps (a smoke run)");
  app.add_option("--timeout", f.timeout, "communicator timeout, seconds")
      ->check(pt::bench::kPositive);
  CLI11_PARSE(app, argc, argv);
  if (f.quick) {
    f.width = std::min<int64_t>(f.width, 64);
    f.layers = std::min(f.layers, 2);
    f.reps = std::min(f.reps, 2);
  }
  return pt::run_main(f.timeout, [&](pt::Communicator* world) { return run(f, world); });
}
