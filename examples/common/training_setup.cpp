#include "examples/common/training_setup.h"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "engine/comm/mpi.h"
#include "engine/core/error.h"
#include "engine/cuda_plugin.h"
#include "engine/parallel/data_parallel_trainer.h"
#include "engine/pipeline/step_trace.h"
#include "engine/trace/bubble.h"
#include "engine/trace/chrome_trace.h"
#include "engine/trace/timeline_svg.h"
#include "engine/trainer.h"

namespace pt::examples {

void add_parallel_flags(CLI::App& app, ParallelFlags& f) {
  app.add_option("--devices", f.devices, "one device per stage and replica: cpu:0,cpu:1 | cpu:0..3 | auto")
      ->capture_default_str();
  app.add_option("--precision", f.precision,
                 "GEMM/conv arithmetic on CUDA devices: fp32 | tf32 | bf16 (fp32 weights and optimizer state)")
      ->capture_default_str();
  app.add_option("--threads", f.threads, "threads per device (0: cores / devices)");
  app.add_option("--stages", f.stages, "pipeline stages S (one device each)")->capture_default_str();
  app.add_option("--dp", f.dp, "data-parallel replicas R of the pipeline (R x S devices or processes)")
      ->capture_default_str();
  app.add_option("--microbatches", f.microbatches, "split each replica's batch into M micro-batches")
      ->capture_default_str();
  app.add_option("--schedule", f.schedule, "gpipe | 1f1b | interleaved:V | zb-h1 | file:PATH")->capture_default_str();
  app.add_option("--partition", f.partition, "uniform | params | time | memory | layout:a,b,...")->capture_default_str();
  app.add_option("--costs", f.costs, "layer costs for the partitioner: estimate | profile")->capture_default_str();
  app.add_option("--mem-cap", f.mem_cap_mib, "memory cap per device in MiB (--partition memory)");
  app.add_option("--recompute", f.recompute, "never | always | except_last | every:K")->capture_default_str();
  app.add_option("--timeout", f.timeout, "seconds any wait for a peer may take")->capture_default_str();
  app.add_option("--bucket-mb", f.bucket_mb, "gradients are all-reduced in buckets of this many MiB")
      ->capture_default_str();
  app.add_flag("--plan-only", f.plan_only, "print partition, schedule and predicted step time, then exit");
  app.add_option("--trace", f.trace, "write a Chrome/Perfetto trace of the last step");
  app.add_option("--timeline", f.timeline, "write an SVG timeline of the last step");
}

void check_parallel_flags(const ParallelFlags& f, int64_t batch) {
  if (f.microbatches < 1) throw UsageError("--microbatches must be >= 1");
  if (f.dp < 1) throw UsageError(fmt::format("--dp {} must be >= 1", f.dp));
  if (!(f.bucket_mb > 0)) throw UsageError(fmt::format("--bucket-mb {} must be > 0", f.bucket_mb));
  if (f.microbatches > batch)
    throw UsageError(fmt::format("--microbatches {} is more than the --batch of {} samples: every "
                                 "micro-batch needs at least one sample", f.microbatches, batch));
  if (static_cast<int64_t>(f.microbatches) * f.dp > batch)
    throw UsageError(fmt::format("--dp {} x --microbatches {} is more than the --batch of {} samples: every "
                                 "micro-batch of every replica needs at least one sample",
                                 f.dp, f.microbatches, batch));
}

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

TrainingSetup make_training(const ParallelFlags& f, Model& model, const std::function<Model()>& make_model,
                            const TrainerConfig& config, int64_t batch, int optimizer_slots, Communicator* world,
                            bool force_pipeline) {
  check_parallel_flags(f, batch);
  const RecomputePolicy recompute = RecomputePolicy::parse(f.recompute);
  const bool pipelined = force_pipeline || f.stages > 1 || f.schedule.starts_with("file:") || !f.trace.empty() ||
                         !f.timeline.empty() || f.plan_only || f.dp > 1 || world;
  PlanRequest request;
  request.devices = f.stages;
  request.microbatches = f.microbatches;
  request.batch = batch / f.dp;  // the costs are for one replica's micro-batch
  request.schedule = ScheduleChoice::parse(f.schedule);
  request.partition = PartitionMethod::parse(f.partition);
  request.mem_cap_bytes = static_cast<int64_t>(f.mem_cap_mib * 1024 * 1024);
  request.costs = CostSource::parse(f.costs);
  request.optimizer_slots = optimizer_slots;
  request.data_parallel = f.dp > 1;

  TrainingSetup s;
  // In one process: one device per stage and replica. Under mpirun: one device per process.
  const int wanted = world ? 1 : f.stages * f.dp;
  s.devices = open_devices(process_devices(f.devices, world), wanted, world ? mpi_threads(f.threads) : f.threads,
                           parse_precision(f.precision));
  if (!s.devices.note.empty()) fmt::print("{}\n", s.devices.note);
  if (static_cast<int>(s.devices.backends.size()) != wanted)
    throw UsageError(fmt::format("--devices {} lists {} device{} but {} needs {}{}", f.devices,
                                 s.devices.backends.size(), s.devices.backends.size() == 1 ? "" : "s",
                                 world ? "each process under mpirun" : fmt::format("--stages {} x --dp {}", f.stages, f.dp),
                                 wanted, world ? "" : ": give one device per stage and replica (e.g. cpu:0..N-1)"));
  for (auto& b : s.devices.backends) s.backends.push_back(b.get());
  s.description = fmt::format("{}{}{}{}", s.backends[0]->describe(),
                              world ? fmt::format(" in each of {} processes", world->size()) : "",
                              f.stages > 1 ? fmt::format(", {} stages, schedule {}, recompute {}", f.stages, f.schedule,
                                                         recompute.str())
                                           : "",
                              f.dp > 1 ? fmt::format(", {} data-parallel replicas (gradient buckets of {} MiB)", f.dp,
                                                     f.bucket_mb)
                                       : "");
  if (!pipelined) {
    s.engine = std::make_unique<Trainer>(model, *s.backends[0], config);
    return s;
  }
  s.plan = make_plan(model, request, s.backends[0]);
  fmt::print("{}", s.plan->report());
  if (f.plan_only) return s;

  PipelineConfig pc;
  pc.trainer = config;
  pc.schedule = s.plan->schedule;
  pc.layers_per_stage = s.plan->partition.layout();
  pc.recompute = recompute;
  pc.timeout_s = f.timeout;
  pc.record_trace = true;  // a clock read per action: cheap, and the bubble is worth printing
  pc.parallel.bucket_bytes = static_cast<size_t>(f.bucket_mb * 1024 * 1024);
  if (world) {
    auto dp = make_process_data_parallel(make_model, *s.backends[0], pc, *world, f.dp);
    s.pipeline = &dp->replica(0);
    s.engine = std::move(dp);
  } else if (f.dp > 1) {
    auto dp = make_local_data_parallel(make_model, s.backends, pc, f.dp);
    s.pipeline = &dp->replica(0);
    s.engine = std::move(dp);
  } else {
    auto p = std::make_unique<PipelineTrainer>(model, s.backends, pc);
    s.pipeline = p.get();
    s.engine = std::move(p);
  }
  return s;
}

void report_pipeline(const ParallelFlags& f, const TrainingSetup& s, Communicator* world) {
  if (!s.pipeline || s.pipeline->step() == 0) return;
  for (const ReductionStats& rs : s.pipeline->last_reduction_stats())
    fmt::print("gradient all-reduce in the last step: {} bucket(s), {:.2f} ms, {:.0f}% hidden behind backward\n",
               rs.buckets, rs.reduce_s * 1e3, 100 * rs.hidden_fraction());
  if (world) return;  // the other devices' traces are in other processes
  const int step = static_cast<int>(s.pipeline->step() - 1);
  // Replica 0's devices come first.
  const std::vector<Backend*> replica0(s.backends.begin(), s.backends.begin() + s.plan->schedule.num_devices);
  const Trace trace = step_trace(s.pipeline->last_trace(), replica0, step);
  const BubbleStats bubble = measure_bubble(trace, step);
  fmt::print("last step: {:.2f} ms measured vs {:.2f} ms predicted; bubble per device measured / predicted:",
             bubble.step_span_us / 1e3, s.plan->predicted_step_s() * 1e3);
  for (size_t d = 0; d < bubble.bubble_fraction.size(); ++d)
    fmt::print(" {:.1f}% / {:.1f}%", 100 * bubble.bubble_fraction[d], 100 * s.plan->simulated.bubble_fraction[d]);
  fmt::print("\n");
  if (!f.trace.empty()) {
    write_chrome_trace(f.trace, trace);
    fmt::print("wrote the trace of the last step to {} (open in https://ui.perfetto.dev)\n", f.trace);
  }
  if (!f.timeline.empty()) {
    write_timeline_svg(f.timeline, trace, step);
    fmt::print("wrote the timeline of the last step to {}\n", f.timeline);
  }
}

namespace {

// Runs body and turns errors into one message and an exit code (2: bad input, 1: failure).
int report_errors(const std::function<int(Communicator*)>& body, Communicator* world, int rank) {
  const std::string who = world ? fmt::format("rank {}: ", rank) : "";
  try {
    return body(world);
  } catch (const UsageError& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}{}\n", who, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}{}\n", who, e.what());
    return 1;
  }
}

}  // namespace

int run_main(double timeout_s, const std::function<int(Communicator* world)>& body) {
  if (!launched_by_mpi()) return report_errors(body, nullptr, 0);
  // One process per device: world rank = replica * devices per replica + device. Rank 0 speaks
  // for the job; a rank that fails ends the whole job (MPI_Abort) instead of leaving its peers
  // waiting, after saying what went wrong.
  std::optional<MpiRuntime> mpi;
  try {
    mpi.emplace();
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: could not start MPI: {}\n", e.what());
    return 1;
  }
  const int rank = mpi->world_rank();
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout))
    fmt::print(stderr, "rank {}: could not silence stdout\n", rank);
  int code = 0;
  {
    std::unique_ptr<Communicator> world;
    try {
      world = mpi_world(timeout_s);
    } catch (const std::exception& e) {
      fmt::print(stderr, "error: rank {}: {}\n", rank, e.what());
      MpiRuntime::abort(1);
    }
    code = report_errors(body, world.get(), rank);
    if (code != 0) MpiRuntime::abort(code);
  }
  return code;
}

}  // namespace pt::examples
