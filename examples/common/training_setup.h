#pragma once
// What the examples share: the scheduler flags (devices, threads, stages, micro-batches,
// schedule, partition, recomputation, data parallelism, timeout, plan/trace output), and turning
// them plus a model into a TrainingEngine — one device (Trainer, the reference), a pipeline,
// R pipeline replicas in this process, or one process per device under mpirun/srun — and the
// main() wrapper that starts MPI when launched by it. Each example keeps only its own model,
// data and loop.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/comm/communicator.h"
#include "engine/devices.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "engine/pipeline/plan.h"
#include "engine/training_engine.h"

namespace pt::examples {

struct ParallelFlags {
  std::string devices = "auto";
  std::string precision = "fp32";  // GEMM arithmetic on CUDA devices: fp32 | tf32 | bf16
  int threads = 0;  // per device; 0: the cores divided between devices (or processes)
  int stages = 1, dp = 1, microbatches = 1;
  std::string schedule = "1f1b", partition = "time", recompute = "never", costs = "estimate";
  double mem_cap_mib = 0, timeout = 60, bucket_mb = 25;
  bool plan_only = false;
  std::string trace, timeline;
};

// Registers --devices --precision --threads --stages --dp --microbatches --schedule --partition --costs
// --mem-cap --recompute --timeout --bucket-mb --plan-only --trace --timeline.
void add_parallel_flags(CLI::App& app, ParallelFlags& f);

// Checks that need no work, against the global batch; throws UsageError naming the fix.
void check_parallel_flags(const ParallelFlags& f, int64_t batch);

struct TrainingSetup {
  DeviceSet devices;                       // opened here (one per process under mpirun)
  std::vector<Backend*> backends;
  std::optional<PipelinePlan> plan;        // when pipelined
  std::unique_ptr<TrainingEngine> engine;  // null after --plan-only
  PipelineTrainer* pipeline = nullptr;     // replica 0 of this process (trace, bubble, reduction)
  std::string description;                 // "cpu:0 (1 thread, ...), 2 stages, schedule 1f1b, ..."
};

// `model` serves the plan and a single device or single pipeline; make_model() builds one more
// per replica. `force_pipeline`: use the pipeline runtime even for one stage (e.g. a parity
// check). Prints the device note and the plan; with --plan-only returns without an engine.
TrainingSetup make_training(const ParallelFlags& f, Model& model, const std::function<Model()>& make_model,
                            const TrainerConfig& config, int64_t batch, int optimizer_slots, Communicator* world,
                            bool force_pipeline = false);

// After training: the gradient reduction of the last step, its measured vs predicted bubble,
// and --trace / --timeline files (single process only).
void report_pipeline(const ParallelFlags& f, const TrainingSetup& setup, Communicator* world);

// True on the process that speaks for the job (world rank 0, or no MPI).
inline bool speaks(Communicator* world) { return !world || world->rank() == 0; }

// The body of main(): without an MPI launcher runs body(nullptr). Under mpirun/srun starts MPI,
// silences stdout on ranks other than 0, runs body(world), and ends the whole job (MPI_Abort)
// when any rank fails, so no peer is left waiting. Errors become one message ("error: ...", with
// the rank under MPI) and exit code 2 (bad input: UsageError) or 1.
int run_main(double timeout_s, const std::function<int(Communicator* world)>& body);

}  // namespace pt::examples
