#include "engine/setup/training_run.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "engine/cuda_plugin.h"
#include "engine/parallel/data_parallel_trainer.h"
#include "engine/parallel/ps_trainer.h"
#include "engine/pipeline/async_update_limits.h"
#include "engine/pipeline/step_trace.h"
#include "engine/setup/auto_plan.h"
#include "engine/trace/bubble.h"
#include "engine/trace/chrome_trace.h"
#include "engine/trace/timeline_svg.h"

namespace pt {

namespace {

// Under mpirun each process opens one device. "auto" there means this node's GPU number
// local rank mod GPUs (Open MPI and Slurm export the local rank), so the ranks of a node spread
// over its GPUs; without GPUs, CPU devices as usual.
std::string process_devices(const std::string& devices, Communicator* world) {
  if (!world || devices != "auto" || !cuda_status().available) return devices;
  int local_rank = world->rank();
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"})
    if (const char* v = std::getenv(name); v != nullptr && v[0] != '\0') {
      local_rank = std::atoi(v);
      break;
    }
  return fmt::format("cuda:{}", local_rank % static_cast<int>(cuda_status().devices.size()));
}

// Threads per process under mpirun: the cores this process may use, shared with the other
// processes of the job on this node (Open MPI and Slurm say how many there are).
int mpi_threads(int requested) {
  if (requested > 0) return requested;
  int local = 1;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS"})
    if (const char* v = std::getenv(var); v && std::atoi(v) > 0) {
      local = std::atoi(v);
      break;
    }
  // Open MPI binds each of up to 2 processes to its own core: then the affinity already says 1.
  const int cores = available_cores();
  return std::max(1, cores >= local ? cores / local : 1);
}

}  // namespace

TrainingRun make_training(const TrainingOptions& opt, Model& model,
                          const std::function<Model()>& make_model, const TrainerConfig& config,
                          int64_t batch, Communicator* world) {
  opt.check(batch);
  if (opt.plan_auto) {
    if (world)
      throw UsageError(
          "--plan auto plans the devices of one process; under mpirun give --stages, --dp, "
          "--microbatches and --schedule (a single-process --plan auto --plan-only prints them)");
    AutoPlan a = plan_automatically(opt, model, make_model, config.optimizer, batch);
    TrainingRun run = make_training(a.options, model, make_model, config, batch, world);
    run.auto_plan = a.chosen;
    return run;
  }
  if (config.microbatches != 1 && config.microbatches != opt.microbatches)
    throw UsageError(fmt::format(
        "the trainer's config says {} micro-batches but the training options say {}: set "
        "TrainingOptions::microbatches only",
        config.microbatches, opt.microbatches));
  if (opt.async_update) refuse_unsupported_with_async(config.clip_norm, false);
  TrainerConfig trainer_config = config;
  trainer_config.microbatches = opt.microbatches;
  const bool pipelined = opt.pipelined() || world;
  PlanRequest request;
  request.devices = opt.stages;
  request.microbatches = opt.microbatches;
  request.batch = batch / opt.dp;  // the costs are for one replica's micro-batch
  request.schedule = opt.schedule;
  request.partition = opt.partition;
  request.mem_cap_bytes = static_cast<int64_t>(opt.mem_cap_mib * 1024 * 1024);
  request.costs = opt.costs;
  request.optimizer_slots = config.optimizer.state_slots();
  request.data_parallel = opt.dp > 1;
  request.recompute = opt.recompute;

  TrainingRun s;
  s.options = opt;
  // In one process: one device per stage and replica. Under mpirun: one device per process.
  const int wanted = world ? 1 : opt.stages * opt.dp;
  s.devices = open_devices(process_devices(opt.devices, world), wanted,
                           world ? mpi_threads(opt.threads) : opt.threads, opt.precision);
  if (opt.print && !s.devices.note.empty()) fmt::print("{}\n", s.devices.note);
  if (static_cast<int>(s.devices.backends.size()) != wanted)
    throw UsageError(fmt::format(
        "--devices {} lists {} device{} but {} needs {}{}", opt.devices, s.devices.backends.size(),
        s.devices.backends.size() == 1 ? "" : "s",
        world ? "each process under mpirun"
              : fmt::format("--stages {} x --dp {}", opt.stages, opt.dp),
        wanted, world ? "" : ": give one device per stage and replica (e.g. cpu:0..N-1)"));
  for (auto& b : s.devices.backends) s.backends.push_back(b.get());
  s.description = fmt::format(
      "{}{}{}{}", s.backends[0]->describe(),
      world ? fmt::format(" in each of {} processes", world->size()) : "",
      opt.stages > 1 ? fmt::format(", {} stages, schedule {}, recompute {}", opt.stages,
                                   opt.schedule.str(), opt.recompute.str())
                     : "",
      opt.ps > 0 ? fmt::format(", {} worker{} and {} parameter server{}", opt.dp * opt.stages,
                               opt.dp * opt.stages == 1 ? "" : "s", opt.ps, opt.ps == 1 ? "" : "s")
      : opt.dp > 1 && opt.shard_optimizer
          ? fmt::format(", {} data-parallel replicas (sharded optimizer: gradients "
                        "reduce-scattered, parameters all-gathered)",
                        opt.dp)
      : opt.dp > 1 && opt.async_update
          ? fmt::format(", {} data-parallel replicas (each stage's gradient all-reduced at its "
                        "UPDATE, no buckets)",
                        opt.dp)
      : opt.dp > 1 ? fmt::format(", {} data-parallel replicas (gradient buckets of {} MiB)", opt.dp,
                                 opt.bucket_mib)
                   : "");
  s.layout = {{"stages", std::to_string(opt.stages)},
              {"replicas", std::to_string(opt.dp)},
              {"processes", std::to_string(world ? world->size() : 1)},
              {"devices", s.backends[0]->describe()}};
  if (!pipelined) {
    s.engine = std::make_unique<Trainer>(model, *s.backends[0], trainer_config);
    s.timed = s.engine.get();
    return s;
  }
  // A stage's layers are timed the way it runs them: every device of this process at once, one
  // chunk of opt.stages per device (under mpirun: this process's device alone).
  s.plan = make_plan(model, request, profiler_on(model, make_model, s.backends, opt.stages));
  if (opt.print) fmt::print("{}", s.plan->report());
  s.layout["schedule"] = opt.schedule.str();
  s.layout["microbatches"] = std::to_string(opt.microbatches);
  s.layout["layers_per_stage"] = fmt::format("{}", fmt::join(s.plan->partition.layout(), ","));
  if (opt.plan_only) return s;

  PipelineConfig pc;
  pc.trainer = trainer_config;
  pc.schedule = s.plan->schedule;
  pc.layers_per_stage = s.plan->partition.layout();
  pc.recompute = opt.recompute;
  pc.timeout_s = opt.timeout_s;
  // Two timing events per action, read once per step (Executor::run): no synchronisation per
  // action, so a GPU's streams still overlap; on the CPU within the noise of a step
  // (pipetrain-bench-flight-recorder, step_trace_train). The bubble report needs it.
  pc.record_trace = true;
  pc.parallel.bucket_bytes = static_cast<size_t>(opt.bucket_mib * 1024 * 1024);
  pc.async_update = opt.async_update;
  pc.async_window = opt.async_window;
  pc.async_delay = opt.async_delay;
  pc.parallel.shard_optimizer = opt.shard_optimizer;
  pc.parallel.slow_replica = opt.slow_replica;
  pc.parallel.slow_factor = opt.slow_factor;
  if (opt.ps > 0) {
    const PsOptions ps{opt.ps, std::max(0, opt.staleness)};
    // Asynchronous servers take one optimizer step per push: R per training step (checkpoints).
    if (ps.staleness > 0) s.layout["optimizer_steps_per_step"] = std::to_string(opt.dp);
    if (opt.print)
      fmt::print(
          "parameter server: {} server{}{}, {}\n", ps.servers, ps.servers == 1 ? "" : "s",
          world ? fmt::format(" (world ranks {}..{}; workers: ranks 0..{}{})", opt.dp * opt.stages,
                              opt.dp * opt.stages + ps.servers - 1, opt.dp * opt.stages - 1,
                              opt.stages > 1
                                  ? fmt::format(", replica r's stage s at r x {} + s", opt.stages)
                                  : std::string())
                : " (threads of this process)",
          ps.staleness == 0
              ? std::string("synchronous")
              : fmt::format("asynchronous, staleness <= {} global steps", ps.staleness));
    if (world) {
      PsProcess p =
          make_process_parameter_server(make_model, *s.backends[0], pc, *world, opt.dp, ps);
      s.serve = std::move(p.serve);
      s.server_stats = std::move(p.server_stats);
      s.workers = p.workers;
      s.lockstep = p.lockstep;
      if (p.engine) {
        s.pipeline = &p.engine->workers().replica(0);
        s.engine = std::move(p.engine);
      }
    } else {
      auto p = make_local_parameter_server(make_model, s.backends, pc, opt.dp, ps);
      s.pipeline = &p->workers().replica(0);
      s.engine = std::move(p);
    }
    s.timed = s.engine.get();
    return s;
  }
  if (world) {
    auto dp = make_process_data_parallel(make_model, *s.backends[0], pc, *world, opt.dp);
    s.pipeline = &dp->replica(0);
    s.engine = std::move(dp);
  } else if (opt.dp > 1) {
    auto dp = make_local_data_parallel(make_model, s.backends, pc, opt.dp);
    s.pipeline = &dp->replica(0);
    s.engine = std::move(dp);
  } else {
    auto p = std::make_unique<PipelineTrainer>(model, s.backends, pc);
    s.pipeline = p.get();
    s.engine = std::move(p);
  }
  // Replica 0's devices here (under mpirun: this process's device).
  s.optimizer_state_bytes = s.pipeline->optimizer_state_bytes();
  s.unsharded_optimizer_state_bytes = s.pipeline->unsharded_optimizer_state_bytes();
  if (opt.print && opt.shard_optimizer)
    fmt::print(
        "optimizer state: {:.3f} MiB {} (1/{} of {:.3f} MiB unsharded)\n",
        static_cast<double>(s.optimizer_state_bytes) / (1 << 20),
        world ? "on this process's device" : fmt::format("per replica ({} device(s))", opt.stages),
        opt.dp, static_cast<double>(s.unsharded_optimizer_state_bytes) / (1 << 20));
  if (opt.async_update)
    s.description += fmt::format(
        ", async updates (PipeDream-2BW, window {} steps, delay {}, second weight version {:.2f} "
        "MiB{})",
        opt.async_window, async_delay_name(opt.async_delay),
        static_cast<double>(s.pipeline->weight_stash_bytes()) / (1 << 20),
        world ? " in this process" : "");
  // Measured, not assumed (README, "Synchronous or asynchronous"): under a delay, heavy-ball
  // momentum lost 3-5 points of Fashion-MNIST accuracy after 3 epochs; Nesterov's form, which for
  // a delay of one step is the spike compensation of Kosson et al. 2021, recovers most of it.
  const OptimizerConfig& o = config.optimizer;
  if (opt.print && (opt.async_update || opt.staleness > 0) && o.kind == "sgd" && o.momentum > 0 &&
      !o.nesterov && (!world || world->rank() == 0))
    fmt::print(
        "note: delayed updates with heavy-ball momentum train slower (Fashion-MNIST, 3 epochs: "
        "3-5 points below synchronous); --nesterov compensates a one-step delay (README: "
        "\"Synchronous or asynchronous\")\n");
  s.timed = s.engine.get();
  return s;
}

namespace {

// The whole step as the training loop sees it (schedule, all-reduce not hidden behind
// backward, norm, update) and, after --plan auto, the chosen plan's prediction beside it.
// `span_s`: the last step's schedule span (0 for one device, which has none).
void report_whole_step(const TrainingRun& s, double span_s) {
  const double whole_s = s.timed ? s.timed->recent_step_seconds() : 0;
  if (whole_s > 0)
    fmt::print("whole training step: {:.2f} ms (median of the last full steps)\n", whole_s * 1e3);
  if (!s.auto_plan || whole_s <= 0) return;
  const PlanCandidate& c = *s.auto_plan;
  fmt::print(
      "plan auto: the chosen plan ({}{} x {}, M = {}, {}, recompute {}) predicted {:.2f} ms per "
      "step ({:.2f} pipeline + {:.2f} all-reduce + {:.2f} norm and update), measured "
      "{:.2f} ms ({:+.0f}%{})\n",
      c.threads > 1 ? fmt::format("{} threads, ", c.threads) : "", c.stages, c.replicas,
      c.microbatches, c.schedule, c.recompute.str(), c.step_s * 1e3, c.pipeline_s * 1e3,
      c.allreduce_s * 1e3, c.epilogue_s * 1e3, whole_s * 1e3, 100 * (whole_s - c.step_s) / c.step_s,
      span_s > 0 ? fmt::format("; the schedule's span {:.2f} ms vs {:.2f} predicted", span_s * 1e3,
                               c.pipeline_s * 1e3)
                 : "");
}

}  // namespace

void report_pipeline(const TrainingOptions& opt, const TrainingRun& s, Communicator* world) {
  if (!s.pipeline) {
    if (!world) report_whole_step(s, 0);  // one device
    return;
  }
  if (s.pipeline->step() == 0) return;
  // Resumed at (or past) the last step: no step ran in this process, so there is no last step to
  // report (its trace would be empty; measuring it used to fail with an internal trace error).
  if (s.pipeline->last_trace().empty()) {
    if (!opt.trace.empty() || !opt.timeline.empty())
      fmt::print("no step ran in this run: no trace or timeline of a last step to write\n");
    return;
  }
  for (const ReductionStats& rs : s.pipeline->last_reduction_stats())
    fmt::print(
        "gradient all-reduce in the last step: {} bucket(s), {:.2f} ms, {:.0f}% hidden behind "
        "backward\n",
        rs.buckets, rs.reduce_s * 1e3, 100 * rs.hidden_fraction());
  if (world) return;  // the other devices' traces are in other processes
  // The last full-size step (an epoch's smaller remainder batch is not compared with the
  // prediction for a full batch).
  if (opt.async_update) {
    // The trace is of the last window (several steps, one bubble), not comparable with the
    // prediction for one synchronous step.
    const Trace trace =
        step_trace(s.pipeline->last_trace(),
                   {s.backends.begin(), s.backends.begin() + s.plan->schedule.num_devices},
                   static_cast<int>(s.pipeline->last_trace_step()));
    const BubbleStats bubble =
        measure_bubble(trace, static_cast<int>(s.pipeline->last_trace_step()));
    fmt::print("last window (from step {}): {:.2f} ms measured; bubble per device:",
               s.pipeline->last_trace_step(), bubble.step_span_us / 1e3);
    for (double b : bubble.bubble_fraction) fmt::print(" {:.1f}%", 100 * b);
    fmt::print("\n");
    return;
  }
  const int step = static_cast<int>(s.pipeline->last_trace_step());
  // Replica 0's devices come first.
  const std::vector<Backend*> replica0(s.backends.begin(),
                                       s.backends.begin() + s.plan->schedule.num_devices);
  const Trace trace = step_trace(s.pipeline->last_trace(), replica0, step);
  const BubbleStats bubble = measure_bubble(trace, step);
  fmt::print(
      "last full step ({}): {:.2f} ms measured vs {:.2f} ms predicted; bubble per device "
      "measured / predicted:",
      step, bubble.step_span_us / 1e3, s.plan->predicted_step_s() * 1e3);
  for (size_t d = 0; d < bubble.bubble_fraction.size(); ++d)
    fmt::print(" {:.1f}% / {:.1f}%", 100 * bubble.bubble_fraction[d],
               100 * s.plan->simulated.bubble_fraction[d]);
  fmt::print("\n");
  report_whole_step(s, bubble.step_span_us * 1e-6);
  if (!opt.trace.empty()) {
    write_chrome_trace(opt.trace, trace);
    fmt::print("wrote the trace of the last full step to {} (open in https://ui.perfetto.dev)\n",
               opt.trace);
  }
  if (!opt.timeline.empty()) {
    write_timeline_svg(opt.timeline, trace, step);
    fmt::print("wrote the timeline of the last full step to {}\n", opt.timeline);
  }
}

}  // namespace pt
