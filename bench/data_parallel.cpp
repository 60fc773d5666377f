// bench/data_parallel: what data parallelism buys on this machine. Run under mpirun with R
// processes of one core each (`mpirun -np 2 pipetrain-bench-data-parallel`); without mpirun it
// runs R replicas as threads of one process. Both figures come from this one run:
//
//   1. baseline: world rank 0 alone (the others wait) trains the model on one core, batch b
//      per step (b = --batch, the per-replica batch), M micro-batches;
//   2. data parallel: R replicas train on R*b per step (b each), gradients all-reduced in buckets
//      of --bucket-mb, overlapped with backward.
//
// Prints JSON lines (rank 0 only):
//   {"bench":"dp_config", "model", "impl":"mpi"|"in_process", "replicas":R, "batch_per_replica",
//   ...}
//   {"bench":"dp_baseline", "step_ms", "samples_per_s"}
//   {"bench":"dp", "bucket_mb", "buckets", "step_ms", "samples_per_s", "speedup" (= DP samples/s /
//    baseline samples/s), "efficiency" (= speedup / R), "allreduce_ms" (per step, on rank 0's
//    device, including the wait for the peer), "hidden_fraction" (share of the all-reduce time
//    that overlapped backward, mean over steps)}          one line per --bucket-mb
//   {"bench":"dp_sharded", "step_ms", "samples_per_s", "speedup", "optimizer_state_bytes" (rank
//    0's replica), "unsharded_optimizer_state_bytes"}     with --shard-optimizer
//   {"bench":"dp_summary", "speedup" (the best), "target":1.85, "met"}
// Timing: warm-up steps, then the best of --steps (noisy shared machine: best-of-N, as nccl-tests).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/synthetic_batch.h"
#include "engine/comm/mpi.h"
#include "engine/core/error.h"
#include "engine/core/random.h"
#include "engine/parallel/data_parallel_trainer.h"
#include "engine/pipeline/plan.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"

namespace {

using Clock = std::chrono::steady_clock;
using pt::bench::Fields;

struct Flags {
  std::string model = "mlp";
  int64_t batch = 128;  // per replica
  int microbatches = 1;
  int replicas = 2;                      // without mpirun (under mpirun: the world size)
  std::vector<double> bucket_mb{4, 25};  // several buckets (overlap with backward) and one
  int steps = 10, warmup = 3;
  double timeout = 120;
  bool shard_optimizer = false;  // also measure --shard-optimizer (one more line)
};

pt::Model make_model(const std::string& name) {
  if (name == "mlp") return pt::fashion_mlp();
  if (name == "cnn") return pt::fashion_cnn();
  throw pt::UsageError(fmt::format("unknown --model '{}': use mlp or cnn", name));
}

using pt::bench::Batch;

template <class Step>
double best_step_s(const Flags& f, Step&& step) {
  for (int i = 0; i < f.warmup; ++i) step();
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < f.steps; ++i) {
    const auto t0 = Clock::now();
    step();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// Only rank 0 speaks under mpirun.
void emit(bool speak, const Fields& fields) {
  if (speak) pt::bench::emit(fields);
}

int run(const Flags& f, pt::Communicator* world) {
  const int R = world ? world->size() : f.replicas;
  const bool speak = !world || world->rank() == 0;
  if (R < 1 || f.batch < f.microbatches)
    throw pt::UsageError("need >= 1 replica and --batch >= --microbatches");
  emit(speak, {{"bench", std::string("dp_config")},
               {"model", f.model},
               {"impl", std::string(world ? "mpi" : "in_process")},
               {"replicas", static_cast<int64_t>(R)},
               {"batch_per_replica", f.batch},
               {"microbatches", static_cast<int64_t>(f.microbatches)},
               {"threads_per_replica", int64_t{1}},
               {"steps", static_cast<int64_t>(f.steps)}});

  // 1. baseline: one replica on one core, alone on the machine.
  double base_s = 0;
  if (speak) {
    auto backend = pt::make_cpu_backend(0, 1);
    backend->bind_current_thread();
    pt::Model m = make_model(f.model);
    pt::Trainer t(m, *backend, pt::bench::sgd_config(f.microbatches));
    const Batch b(f.batch);
    base_s = best_step_s(f, [&] { t.train_step(b.hx, b.hy); });
    emit(speak, {{"bench", std::string("dp_baseline")},
                 {"step_ms", base_s * 1e3},
                 {"samples_per_s", static_cast<double>(f.batch) / base_s}});
  }
  if (world) world->barrier("the end of the baseline");

  // 2. data parallel: R replicas, R * b samples per step, for each bucket size.
  const pt::Model shape = make_model(f.model);
  const auto factory = [&] { return make_model(f.model); };
  std::vector<std::unique_ptr<pt::Backend>> owned;
  std::vector<pt::Backend*> devices;
  for (int r = 0; r < (world ? 1 : R); ++r) {
    owned.push_back(pt::make_cpu_backend(r, 1));
    devices.push_back(owned.back().get());
  }
  const Batch b(f.batch * R);
  double best_speedup = 0;
  // A negative bucket size stands for the --shard-optimizer pass (no buckets: reduce-scatter).
  std::vector<double> passes = f.bucket_mb;
  if (f.shard_optimizer) passes.push_back(-1);
  for (double bucket_mb : passes) {
    pt::PipelineConfig pc;
    pc.trainer = pt::bench::sgd_config(f.microbatches);
    pc.schedule = pt::sched::add_grad_reduction(
        pt::sched::add_communication(pt::sched::generate("1f1b", 1, f.microbatches)));
    pc.layers_per_stage = {shape.num_layers()};
    pc.timeout_s = f.timeout;
    pc.parallel.shard_optimizer = bucket_mb < 0;  // the --shard-optimizer pass (below)
    if (!pc.parallel.shard_optimizer)
      pc.parallel.bucket_bytes = static_cast<size_t>(bucket_mb * 1024 * 1024);
    auto trainer = world ? pt::make_process_data_parallel(factory, *devices[0], pc, *world, R)
                         : pt::make_local_data_parallel(factory, devices, pc, R);
    double hidden = 0, reduce_ms = 0;
    int buckets = 0, measured = 0;
    const double dp_s = best_step_s(f, [&] {
      trainer->train_step(b.hx, b.hy);
      for (const pt::ReductionStats& s : trainer->replica(0).last_reduction_stats()) {
        hidden += s.hidden_fraction();
        reduce_ms += s.reduce_s * 1e3;
        buckets = s.buckets;
        ++measured;
      }
    });
    if (!speak) continue;
    const double base_rate = static_cast<double>(f.batch) / base_s;
    const double dp_rate = static_cast<double>(f.batch * R) / dp_s;
    const double speedup = dp_rate / base_rate;
    if (pc.parallel.shard_optimizer) {
      emit(speak, {{"bench", std::string("dp_sharded")},
                   {"step_ms", dp_s * 1e3},
                   {"samples_per_s", dp_rate},
                   {"speedup", speedup},
                   {"optimizer_state_bytes",
                    static_cast<int64_t>(trainer->replica(0).optimizer_state_bytes())},
                   {"unsharded_optimizer_state_bytes",
                    static_cast<int64_t>(trainer->replica(0).unsharded_optimizer_state_bytes())}});
      continue;
    }
    best_speedup = std::max(best_speedup, speedup);
    emit(speak, {{"bench", std::string("dp")},
                 {"bucket_mb", bucket_mb},
                 {"buckets", static_cast<int64_t>(buckets)},
                 {"step_ms", dp_s * 1e3},
                 {"samples_per_s", dp_rate},
                 {"speedup", speedup},
                 {"efficiency", speedup / R},
                 {"allreduce_ms", measured ? reduce_ms / measured : 0.0},
                 {"hidden_fraction", measured ? hidden / measured : 0.0}});
  }
  const double target = 1.85 * R / 2;  // the target for R = 2, scaled
  emit(speak, {{"bench", std::string("dp_summary")},
               {"replicas", static_cast<int64_t>(R)},
               {"speedup", best_speedup},
               {"target", target},
               {"met", best_speedup >= target}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pipetrain-bench-data-parallel: R replicas (mpirun -np R, or threads) vs one core"};
  Flags f;
  app.add_option("--model", f.model, "mlp or cnn")->capture_default_str();
  app.add_option("--batch", f.batch, "samples per replica per step")->capture_default_str();
  app.add_option("--microbatches", f.microbatches, "micro-batches per replica")
      ->capture_default_str();
  app.add_option("--replicas", f.replicas, "replicas when not under mpirun (threads)")
      ->capture_default_str();
  app.add_option("--bucket-mb", f.bucket_mb, "gradient bucket sizes to measure, e.g. 4,25")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--steps", f.steps, "timed steps (best is reported)")->capture_default_str();
  app.add_option("--warmup", f.warmup, "untimed steps first")->capture_default_str();
  app.add_flag("--shard-optimizer", f.shard_optimizer,
               "also measure the sharded optimizer (ZeRO-1) and its state bytes");
  CLI11_PARSE(app, argc, argv);
  std::optional<pt::MpiRuntime> mpi;
  std::unique_ptr<pt::Communicator> world;
  try {
    if (pt::launched_by_mpi()) {
      mpi.emplace();
      world = pt::mpi_world(f.timeout);
    }
    const int code = run(f, world.get());
    world.reset();
    return code;
  } catch (const pt::UsageError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    if (mpi) pt::MpiRuntime::abort(2);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    if (mpi) pt::MpiRuntime::abort(1);
    return 1;
  }
}
