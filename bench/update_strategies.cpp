// bench/update_strategies: synchronous or asynchronous, all-reduce or parameter server, measured
// against each other on one model (the Fashion-MNIST MLP, synthetic batches of the same shape:
// the speed does not depend on the values) in one run:
//
//   mpirun -np 3 --oversubscribe --bind-to none pipetrain-bench-update-strategies [--quick]    (R =
//   2 workers) mpirun -np 5 --oversubscribe --bind-to none pipetrain-bench-update-strategies  (R =
//   4)
//
// R + 1 processes of one thread each: world ranks 0..R-1 are the workers (replicas) of every
// data-parallel row; rank R is the parameter server of the PS rows and waits (sleeping, in a
// polled barrier) during the others. The pipeline rows run on rank 0 alone, two stages as two
// devices (cpu:0, cpu:1) of one process, while the other ranks wait. More processes than cores
// (R = 4 on 2 cores) rank the strategies rather than measure their scaling.
//
// Rows (JSON lines, rank 0):
//   {"bench":"update_strategies_config", ...}
//   {"bench":"update_strategy", "strategy", "straggler", "steps_per_s", "steps_per_s_min",
//    "steps_per_s_max", "reps", "samples_per_s", ...}   one per strategy and straggler setting
//     strategy: allreduce | sharded_optimizer | ps_sync | ps_async_t1 | ps_async_t4 |
//               pipeline_1f1b_flush | pipeline_async_2bw | pipeline_async_per_stage |
//               pipeline_async_per_microbatch
//     steps_per_s: global steps (one global batch each) per second, the median of --reps
//       repetitions. All-reduce and pipeline rows: rank 0's timed steps. PS rows: the server's
//       applied pushes per second / R while every worker still ran (an asynchronous fast worker
//       finishes its steps first; after that the rate is the slow one's alone).
//     straggler "1:2": worker 1 sleeps as long again as it computed, every step (--slow-worker)
//     PS rows add the staleness observed (max and mean, in pushes) and the server's bytes;
//     the sharded row the optimizer-state bytes per worker, and the unsharded figure.
//   {"bench":"update_strategies_summary", "workers", "async_ps_over_sync_allreduce_with_straggler",
//    "async_pipeline_over_flush", "sharded_optimizer_state_fraction", ...} (the targets, "met",
//    are for R = 2)
//
// Convergence (accuracy after 3 epochs of real Fashion-MNIST, async vs sync) is measured by
// scripts/update-strategies-accuracy.sh, which runs the example program in each mode.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/repeated_seconds.h"
#include "bench/synthetic_batch.h"
#include "engine/comm/mpi.h"
#include "engine/core/error.h"
#include "engine/setup/training_run.h"
#include "layers/zoo.h"

namespace {

using Clock = std::chrono::steady_clock;
using pt::bench::Fields;
using pt::bench::Spread;

struct Flags {
  int64_t batch = 256;  // global batch of every row
  int steps = 30;       // timed steps per repetition
  int warmup = 3;
  int reps = 3;
  int microbatches = 4;  // the pipeline rows (S = 2)
  double timeout = 600;
  bool quick = false;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

pt::TrainingOptions base_options(const Flags& f) {
  pt::TrainingOptions o;
  o.devices = "cpu:0";
  o.threads = 1;
  o.timeout_s = f.timeout;
  o.print = false;
  return o;
}

struct Row {
  std::string strategy, straggler = "none";
  std::vector<double> rates;  // global steps/s, one per repetition
  Fields extra;
};

struct Bench {
  const Flags& f;
  pt::Communicator& world;
  int workers;                                 // R: world ranks 0..R-1
  std::unique_ptr<pt::Communicator> replicas;  // the workers of the all-reduce rows
  pt::bench::Batch batch;
  std::vector<Row> rows;

  Bench(const Flags& flags, pt::Communicator& w)
      : f(flags),
        world(w),
        workers(w.size() - 1),
        replicas(w.split(w.rank() < workers ? 0 : 1, w.rank(), "update-strategies workers")),
        batch(flags.batch) {}

  bool speaker() const { return world.rank() == 0; }

  void emit_row(const Row& r) {
    if (!speaker()) return;
    const Spread s = pt::bench::spread_of(r.rates);
    Fields fields = {{"bench", std::string("update_strategy")},
                     {"strategy", r.strategy},
                     {"straggler", r.straggler},
                     {"steps_per_s", s.median},
                     {"steps_per_s_min", s.min},
                     {"steps_per_s_max", s.max},
                     {"reps", static_cast<int64_t>(s.reps)},
                     {"samples_per_s", s.median * static_cast<double>(f.batch)}};
    for (const auto& e : r.extra) fields.push_back(e);
    pt::bench::emit(fields);
  }

  // Timed train_step calls on rank 0 (every rank of the engine takes the same steps).
  double time_steps(pt::TrainingEngine& engine) {
    for (int i = 0; i < f.warmup; ++i) engine.train_step(batch.hx, batch.hy);
    const auto t0 = Clock::now();
    for (int i = 0; i < f.steps; ++i) engine.train_step(batch.hx, batch.hy);
    return f.steps / seconds_since(t0);
  }

  // --dp R over the workers (all-reduce, or the sharded optimizer).
  void data_parallel(const std::string& name, bool sharded, const std::string& straggler) {
    Row row{name, straggler, {}, {}};
    if (world.rank() < workers) {
      pt::TrainingOptions o = base_options(f);
      o.dp = workers;
      o.shard_optimizer = sharded;
      set_straggler(o, straggler);
      pt::Model model = pt::fashion_mlp();
      pt::TrainingRun run = pt::make_training(o, model, pt::fashion_mlp, pt::bench::sgd_config(1),
                                              f.batch, replicas.get());
      for (int r = 0; r < f.reps; ++r) row.rates.push_back(time_steps(*run.engine));
      row.extra = {
          {"optimizer_state_bytes_per_worker", static_cast<int64_t>(run.optimizer_state_bytes)},
          {"unsharded_optimizer_state_bytes",
           static_cast<int64_t>(run.unsharded_optimizer_state_bytes)}};
    }
    world.barrier("the end of a data-parallel row");
    emit_row(row);
    rows.push_back(std::move(row));
  }

  // --dp R --ps 1 over every rank (rank R serves). One engine per repetition: the server's
  // rate is taken over one run of every worker.
  void parameter_server(const std::string& name, int staleness, const std::string& straggler) {
    Row row{name, straggler, {}, {}};
    double max_stale = 0, mean_stale = 0, server_bytes = 0;
    for (int r = 0; r < f.reps; ++r) {
      pt::TrainingOptions o = base_options(f);
      o.dp = workers;
      o.ps = 1;
      o.staleness = staleness;
      set_straggler(o, straggler);
      pt::Model model = pt::fashion_mlp();
      double v[4] = {0, 0, 0, 0};  // rate, max staleness, mean staleness, server bytes
      {
        pt::TrainingRun run =
            pt::make_training(o, model, pt::fashion_mlp, pt::bench::sgd_config(1), f.batch, &world);
        if (run.serve) {
          run.serve();
          const pt::PsServerStats& s = *run.server_stats;
          v[0] = s.pushes_per_s() / workers;
          v[1] = static_cast<double>(s.max_staleness);
          v[2] = s.mean_staleness();
          v[3] = static_cast<double>(s.held_bytes);
        } else {
          for (int i = 0; i < f.warmup + f.steps; ++i) run.engine->train_step(batch.hx, batch.hy);
        }
      }  // the workers' engines say STOP here; the server's loop has returned
      world.all_reduce(v, 4, pt::ElemType::f64, pt::ReduceOp::sum,
                       "the parameter server's figures");
      row.rates.push_back(v[0]);
      max_stale = std::max(max_stale, v[1]);
      mean_stale += v[2] / f.reps;
      server_bytes = v[3];
    }
    row.extra = {{"staleness", static_cast<int64_t>(staleness)},
                 {"observed_staleness_max_pushes", max_stale},
                 {"observed_staleness_mean_pushes", mean_stale},
                 {"server_bytes", server_bytes}};
    emit_row(row);
    rows.push_back(std::move(row));
  }

  // Two stages on rank 0 (cpu:0, cpu:1): 1F1B with a flush per step, and PipeDream-2BW with one
  // window of --steps steps per repetition (--async-delay uniform, per-stage and per-microbatch,
  // the default: the same schedule, a second weight version on both stages or on the first
  // only, bound per stage or per micro-batch). The repetitions alternate between the four, so
  // that a drift of the machine's speed during the benchmark falls on every row alike and the
  // async / flush ratio compares like with like.
  void pipelines() {
    struct Spec {
      std::string name;
      bool async;
      pt::AsyncDelay delay;
    };
    const std::vector<Spec> specs = {
        {"pipeline_1f1b_flush", false, pt::AsyncDelay::uniform},
        {"pipeline_async_2bw", true, pt::AsyncDelay::uniform},
        {"pipeline_async_per_stage", true, pt::AsyncDelay::per_stage},
        {"pipeline_async_per_microbatch", true, pt::AsyncDelay::per_microbatch}};
    std::vector<Row> measured;
    for (const Spec& s : specs) measured.push_back({s.name, "none", {}, {}});
    if (speaker()) {
      pt::Model model = pt::fashion_mlp();
      std::vector<pt::TrainingRun> runs;
      for (const Spec& s : specs) {
        pt::TrainingOptions o = base_options(f);
        o.devices = "cpu:0,cpu:1";
        o.stages = 2;
        o.microbatches = f.microbatches;
        o.async_update = s.async;
        o.async_window = f.steps;
        o.async_delay = s.delay;
        runs.push_back(pt::make_training(o, model, {}, pt::bench::sgd_config(1), f.batch, nullptr));
      }
      std::vector<pt::HostBatch> window(static_cast<size_t>(f.steps), {batch.hx, batch.hy});
      for (int r = 0; r < f.reps + 1; ++r)  // the first round warms up
        for (size_t k = 0; k < specs.size(); ++k) {
          const auto t0 = Clock::now();
          if (specs[k].async) {
            runs[k].engine->train_steps(window);
          } else {
            for (int i = 0; i < f.steps; ++i) runs[k].engine->train_step(batch.hx, batch.hy);
          }
          if (r > 0) measured[k].rates.push_back(f.steps / seconds_since(t0));
        }
      for (size_t k = 0; k < specs.size(); ++k)
        measured[k].extra = {
            {"stages", int64_t{2}},
            {"microbatches", static_cast<int64_t>(f.microbatches)},
            {"ideal_async_gain", static_cast<double>(f.microbatches + 1) / f.microbatches},
            {"second_weight_version_bytes",
             static_cast<int64_t>(runs[k].pipeline->weight_stash_bytes())}};
    }
    world.barrier("the end of the pipeline rows");
    for (Row& row : measured) {
      emit_row(row);
      rows.push_back(std::move(row));
    }
  }

  static void set_straggler(pt::TrainingOptions& o, const std::string& straggler) {
    if (straggler == "none") return;
    o.slow_replica = 1;
    o.slow_factor = 2.0;
  }

  double median_rate(const std::string& strategy, const std::string& straggler) const {
    for (const Row& r : rows)
      if (r.strategy == strategy && r.straggler == straggler)
        return pt::bench::spread_of(r.rates).median;
    return 0;
  }

  const Row* find(const std::string& strategy) const {
    for (const Row& r : rows)
      if (r.strategy == strategy) return &r;
    return nullptr;
  }
};

int run(const Flags& f, pt::Communicator& world) {
  if (world.size() < 3)
    throw pt::UsageError(fmt::format(
        "{} processes were started; this benchmark needs R + 1 >= 3 (R workers and a parameter "
        "server): mpirun -np 3 --oversubscribe --bind-to none pipetrain-bench-update-strategies",
        world.size()));
  Bench b(f, world);
  if (b.speaker())
    pt::bench::emit({{"bench", std::string("update_strategies_config")},
                     {"model", std::string("fashion_mlp 784-1024x4-10")},
                     {"batch", f.batch},
                     {"steps", static_cast<int64_t>(f.steps)},
                     {"reps", static_cast<int64_t>(f.reps)},
                     {"workers", static_cast<int64_t>(b.workers)},
                     {"threads_per_process", int64_t{1}},
                     {"cores", static_cast<int64_t>(std::thread::hardware_concurrency())},
                     {"optimizer", std::string("sgd momentum 0.9")}});
  const std::string straggler = "1:2";
  b.data_parallel("allreduce", false, "none");
  b.data_parallel("sharded_optimizer", true, "none");
  b.parameter_server("ps_sync", 0, "none");
  b.parameter_server("ps_async_t1", 1, "none");
  b.parameter_server("ps_async_t4", 4, "none");
  b.data_parallel("allreduce", false, straggler);
  b.parameter_server("ps_sync", 0, straggler);
  b.parameter_server("ps_async_t1", 1, straggler);
  b.parameter_server("ps_async_t4", 4, straggler);
  b.pipelines();

  if (b.speaker()) {
    const double allreduce_slow = b.median_rate("allreduce", straggler);
    const double ps_async_slow = b.median_rate("ps_async_t1", straggler);
    const double flush = b.median_rate("pipeline_1f1b_flush", "none");
    const double async = b.median_rate("pipeline_async_2bw", "none");
    double fraction = 0;
    if (const Row* sharded = b.find("sharded_optimizer"))
      for (const auto& [key, value] : sharded->extra)
        if (key == "optimizer_state_bytes_per_worker") fraction = std::get<int64_t>(value);
    if (const Row* sharded = b.find("sharded_optimizer"))
      for (const auto& [key, value] : sharded->extra)
        if (key == "unsharded_optimizer_state_bytes" && std::get<int64_t>(value) > 0)
          fraction /= static_cast<double>(std::get<int64_t>(value));
    const double ps_ratio = allreduce_slow > 0 ? ps_async_slow / allreduce_slow : 0;
    const double pipe_ratio = flush > 0 ? async / flush : 0;
    pt::bench::Fields summary = {{"bench", std::string("update_strategies_summary")},
                                 {"workers", static_cast<int64_t>(b.workers)},
                                 {"async_ps_over_sync_allreduce_with_straggler", ps_ratio},
                                 {"async_pipeline_over_flush", pipe_ratio},
                                 {"sharded_optimizer_state_fraction", fraction}};
    if (b.workers == 2) {  // the targets are for two workers, one slowed 2x
      summary.emplace_back("targets", std::string("ps >= 1.3, pipeline >= 1.2"));
      summary.emplace_back("met", ps_ratio >= 1.3 && pipe_ratio >= 1.2);
    }
    pt::bench::emit(summary);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "pipetrain-bench-update-strategies: all-reduce, sharded optimizer, parameter server (sync "
      "and async) and asynchronous pipelines on one model (mpirun -np R+1: R workers, 1 server)"};
  Flags f;
  app.add_option("--batch", f.batch, "global batch of every row")->capture_default_str();
  app.add_option("--steps", f.steps, "timed steps per repetition")->capture_default_str();
  app.add_option("--reps", f.reps, "repetitions (the median is reported)")->capture_default_str();
  app.add_option("--microbatches", f.microbatches, "micro-batches of the pipeline rows")
      ->capture_default_str();
  app.add_flag("--quick", f.quick, "a smoke run: 4 steps, 1 repetition, batch 64");
  CLI11_PARSE(app, argc, argv);
  if (f.quick) {
    f.steps = 4;
    f.warmup = 1;
    f.reps = 1;
    f.batch = 64;
  }
  std::optional<pt::MpiRuntime> mpi;
  std::unique_ptr<pt::Communicator> world;
  try {
    if (!pt::launched_by_mpi())
      throw pt::UsageError(
          "run under mpirun: mpirun -np 3 --oversubscribe --bind-to none "
          "pipetrain-bench-update-strategies");
    mpi.emplace();
    world = pt::mpi_world(f.timeout);
    const int code = run(f, *world);
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
