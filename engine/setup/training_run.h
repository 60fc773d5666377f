#pragma once
// The composition root: TrainingOptions plus a model -> a TrainingEngine: one device (Trainer,
// the reference), a pipeline over S devices, R pipeline replicas in this process, or one process
// per device under mpirun/srun (when `world` is given; see run_main.h). One pass, each step a
// function that hands its result to the next and none re-derives what an earlier one made:
//   1. the options, checked once (TrainingOptions::check and what cannot go together)
//   2. the devices, opened once (run_devices.h)
//   3. --plan auto: the plan searched on those devices (auto_plan.h); its options replace the
//      user's (one device with all the threads, when the planner merges them, is then opened)
//   4. the pipeline's plan: partition and schedule for the options (engine/plan/plan.h)
//   5. the engine: replicas and their groups, each pipeline with its update strategy
//      (run_engine.h)
//
//   pt::TrainingOptions opt;
//   opt.devices = "cpu:0,cpu:1";
//   opt.stages = 2;
//   opt.microbatches = 4;
//   pt::TrainingRun run = pt::make_training(opt, make_model, batch);
//   pt::fit(*run.engine, train, &test, {.batch = batch});   // or run.engine->train_step(x, y)
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/devices/devices.h"
#include "engine/parallel/parameter_server.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "engine/plan/plan.h"
#include "engine/plan/planner.h"
#include "engine/setup/training_options.h"
#include "engine/train/trainer.h"
#include "engine/train/training_engine.h"

namespace pt {

struct TrainingRun {
  // The model the engine trains (replica 0's) when the run built it (make_training with a model
  // factory only); declared first, so that it outlives the engine.
  std::unique_ptr<Model> model;
  TrainingOptions options;                 // what ran: the given ones, or --plan auto's choice
  std::optional<PlanCandidate> auto_plan;  // --plan auto: the plan chosen, with its prediction
  DeviceSet devices;                       // opened here (one per process under mpirun)
  std::vector<Backend*> backends;          // replica 0's S devices first
  std::optional<PipelinePlan> plan;        // when pipelined
  std::unique_ptr<TrainingEngine> engine;  // null with plan_only
  PipelineTrainer* pipeline = nullptr;     // replica 0 of this process (trace, bubble, reduction)
  const TrainingEngine* timed = nullptr;   // engine, also once moved out: its recent step times
  std::string description;                 // "cpu:0 (1 thread, ...), 2 stages, schedule 1f1b, ..."
  // The optimizer the engine steps with: the given one, or with --update async its look-ahead
  // form (TrainingOptions::async_momentum).
  OptimizerConfig optimizer;
  // How the model is laid out, as a checkpoint records it: stages, replicas, processes,
  // schedule, layers per stage.
  std::map<std::string, std::string> layout;
  // --ps under mpirun: on a server process, its loop (run it instead of training; engine is
  // null); on a worker, the workers' group, the training loop's world (the servers do not take
  // part in its collectives).
  std::function<int()> serve;
  std::shared_ptr<PsServerStats> server_stats;  // that server's observations, once serve() returned
  Communicator* workers = nullptr;
  // --ps under mpirun, on a worker: the workers always at this one's step (all of them when
  // synchronous; this replica's stages when asynchronous, null with one stage), the training
  // loop's stop-signal check (asynchronous workers learn of the others' through the servers).
  Communicator* lockstep = nullptr;
  // Optimizer-state bytes on replica 0's devices of this process (with --shard-optimizer: its
  // shards, ~1/R of the unsharded figure); 0 for a single-device Trainer.
  size_t optimizer_state_bytes = 0, unsharded_optimizer_state_bytes = 0;
};

// `model` serves the plan and a single device or single pipeline; make_model() builds one more
// per replica (it may be empty when opt.dp == 1 and world is null). `config` is the trainer's;
// its micro-batch count must be 1 (the default) or opt.microbatches, which wins. `batch` is the
// global batch B of every step. `world`: all processes of an mpirun job (one device each), or
// null for one process. Checks opt (TrainingOptions::check), opens the devices, plans (printing
// the device note and the plan unless !opt.print) and builds the engine; with opt.plan_only
// returns without one. With opt.plan_auto, searches first (auto_plan.h) and builds the chosen
// plan (run.options). Throws UsageError naming the fix.
TrainingRun make_training(const TrainingOptions& opt, Model& model,
                          const std::function<Model()>& make_model, const TrainerConfig& config,
                          int64_t batch, Communicator* world = nullptr);

// The library's entry point: the run builds its model with make_model() and owns it
// (TrainingRun::model; make_model() is called again for each further replica and for the
// profiler). `config`: the optimizer, learning rates, clipping and seed (defaults: SGD).
TrainingRun make_training(const TrainingOptions& opt, const std::function<Model()>& make_model,
                          int64_t batch, const TrainerConfig& config = {},
                          Communicator* world = nullptr);

// After training: the gradient reduction of the last step, its measured vs predicted bubble,
// and opt.trace / opt.timeline files (single process only); the whole step's wall time and,
// after --plan auto, the chosen plan's prediction beside it (one device too).
void report_pipeline(const TrainingOptions& opt, const TrainingRun& run,
                     Communicator* world = nullptr);

}  // namespace pt
