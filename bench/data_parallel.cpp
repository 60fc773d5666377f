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
//   {"bench":"dp_summary", "speedup" (the best median), "target":1.85, "met"}
// Timing: warm-up steps, then --steps timed ones (rank 0's clock; the step ends when rank 0's
// all-reduce did). step_ms and samples_per_s are the median with _min and _max
// (bench/repeated_seconds.h); speedup = the ratio of the medians, speedup_min and speedup_max
// divide by the slowest and fastest data-parallel step.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/positive.h"
#include "bench/repeated_seconds.h"
#include "bench/synthetic_batch.h"
#include "engine/comm/mpi.h"
#include "engine/core/error.h"
#include "engine/core/random.h"
#include "engine/plan/plan.h"
#include "engine/replicas/data_parallel_trainer.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"

namespace {

using pt::bench::Fields;
using pt::bench::Spread;

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
Spread step_seconds(const Flags& f, Step&& step) {
  return pt::bench::spread_of(pt::bench::repeated_seconds(f.warmup, f.steps, step));
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
  Spread base_s;
  if (speak) {
    auto backend = pt::make_cpu_backend(0, 1);
    backend->bind_current_thread();
    pt::Model m = make_model(f.model);
    pt::Trainer t(m, *backend, pt::bench::sgd_config(f.microbatches));
    const Batch b(f.batch);
    base_s = step_seconds(f, [&] { t.train_step(b.hx, b.hy); });
    Fields out{{"bench", std::string("dp_baseline")}};
    pt::bench::add_spread(out, "step_ms", base_s, 1e3);
    pt::bench::add_spread(out, "samples_per_s", pt::bench::rate_of(base_s, f.batch));
    out.emplace_back("reps", int64_t{base_s.reps});
    emit(speak, out);
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
    const Spread dp_s = step_seconds(f, [&] {
      trainer->train_step(b.hx, b.hy);
      for (const pt::ReductionStats& s : trainer->replica(0).last_reduction_stats()) {
        hidden += s.hidden_fraction();
        reduce_ms += s.reduce_s * 1e3;
        buckets = s.buckets;
        ++measured;
      }
    });
    if (!speak) continue;
    const double base_rate = static_cast<double>(f.batch) / base_s.median;
    const Spread dp_rate = pt::bench::rate_of(dp_s, static_cast<double>(f.batch * R));
    const Spread speedup = pt::bench::rate_of(dp_s, static_cast<double>(f.batch * R) / base_rate);
    Fields out{{"bench", std::string(pc.parallel.shard_optimizer ? "dp_sharded" : "dp")}};
    if (!pc.parallel.shard_optimizer) {
      out.emplace_back("bucket_mb", bucket_mb);
      out.emplace_back("buckets", static_cast<int64_t>(buckets));
    }
    pt::bench::add_spread(out, "step_ms", dp_s, 1e3);
    pt::bench::add_spread(out, "samples_per_s", dp_rate);
    pt::bench::add_spread(out, "speedup", speedup);
    out.emplace_back("reps", int64_t{dp_s.reps});
    if (pc.parallel.shard_optimizer) {
      out.emplace_back("optimizer_state_bytes",
                       static_cast<int64_t>(trainer->replica(0).optimizer_state_bytes()));
      out.emplace_back("unsharded_optimizer_state_bytes",
                       static_cast<int64_t>(trainer->replica(0).unsharded_optimizer_state_bytes()));
      emit(speak, out);
      continue;
    }
    best_speedup = std::max(best_speedup, speedup.median);
    out.emplace_back("efficiency", speedup.median / R);
    out.emplace_back("allreduce_ms", measured ? reduce_ms / measured : 0.0);
    out.emplace_back("hidden_fraction", measured ? hidden / measured : 0.0);
    emit(speak, out);
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
  app.add_option("--steps", f.steps, "timed steps (median and spread)")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
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
