#pragma once
// How a pipeline replica's parameters change at a step's boundary: the piece PipelineTrainer
// calls, so that the trainer only runs schedules and never branches on the update mode.
//   FlushUpdate          synchronous: every step ends with a flush, then the step epilogue
//                        (with --dp R its gradients are all-reduced in buckets during backward)
//   ShardedUpdate        synchronous, --shard-optimizer: reduce-scatter, step 1/R, all-gather
//   ParameterServerUpdate  --ps: push the gradients, pull the servers' parameters
//   AsyncUpdate          --update async (PipeDream-2BW): K steps as one schedule without a
//                        flush; each stage binds its step's weight version and applies its own
//                        UPDATE action
// make_update_strategy (engine/pipeline/update_choice.h) picks one from the PipelineConfig.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/optim/optimizer.h"
#include "engine/parallel/gradient_reducer.h"
#include "engine/parallel/parallel_context.h"
#include "engine/parallel/parameter_residency.h"
#include "engine/train/stage_parameters.h"
#include "engine/train/stage_state.h"
#include "engine/train/step_epilogue.h"
#include "engine/train/trainer.h"
#include "layers/model.h"
#include "schedule/schedule.h"

namespace pt {

// What every strategy is built from: the model, the stages of this replica and where they are.
struct UpdateContext {
  Model* model = nullptr;
  TrainerConfig trainer;                 // optimizer, learning rates, clipping, M, seed
  ParallelContext parallel;              // replicas, groups, parameter servers
  std::vector<StageParameters*> stages;  // per stage; nullptr for a stage of another process
  std::vector<int> stage_device;         // per stage: its schedule device
  std::vector<int> stage_first_layer;    // per stage, and the model's layer count last
  int num_devices = 0;                   // schedule devices of one replica

  int stage_of_layer(int layer) const;
};

// What a replica holds for its stages between steps (the run summary's memory line), and the
// most gathered at once during the last step (full sharding; 0 in the other modes).
struct HeldBytes {
  size_t parameters = 0, gradients = 0, optimizer = 0, gathered_peak = 0;
};

class UpdateStrategy {
 public:
  virtual ~UpdateStrategy() = default;

  // ---- synchronous steps: one schedule run per step, a flush at its end ----
  // Before the step's schedule runs (its gradients started): e.g. pull the servers' parameters.
  virtual void begin_step(int64_t /*step*/) {}
  // The reducer that device d's executor hands finished gradients to while backward runs
  // (nullptr: none; the gradients are reduced at end_step, if at all).
  virtual GradientReducer* reducer(int /*device*/) { return nullptr; }
  // What device d's executor calls around each layer's compute (nullptr: parameters are always
  // whole), in training and evaluation alike.
  virtual ParameterResidency* residency(int /*device*/) { return nullptr; }
  // Once every held stage's gradients of the step are complete: reduce, take the norm, clip or
  // skip, update. `epilogue` says how to reach the stages (devices' threads, other processes).
  virtual EpilogueResult end_step(int64_t step, const EpilogueConfig& epilogue) = 0;

  // ---- asynchronous windows: several steps as one schedule run, no flush ----
  // 0: synchronous (the calls above); K >= 1: train_steps runs up to K steps per schedule.
  virtual int window() const { return 0; }
  // The lowered schedule of a window of `steps` steps (synchronous strategies have none).
  virtual const sched::Schedule& window_schedule(int steps);
  // Before a compute action of the window's step `step`: binds that step's weights and returns
  // their version (step t computes with W(t - delay)).
  virtual int64_t before_compute(const sched::Action& action, int64_t step);
  // The UPDATE action of stage s for step `step`; returns the stage's gradient norm.
  virtual double update(int stage, int64_t step);
  // After the window: every UPDATE ran (evaluation sees the latest weights).
  virtual void end_window() {}

  // ---- state: checkpoints, resuming, reports ----
  // Stage s's optimizer held here (nullptr: none, e.g. a shard's or a server's stage between
  // saves, or a stage of another process).
  virtual Optimizer* optimizer(int stage) = 0;
  virtual void set_step(int64_t /*step*/) {}
  // Strategies that hold no full optimizer (sharded, parameter server) make one for a checkpoint
  // to load into or be saved from, fill it from the shards (collective over the data-parallel
  // groups, every replica at once) and hand it back; no-ops for the others.
  virtual void make_full_optimizers() {}
  virtual void gather_full_optimizers() {}
  virtual void take_full_optimizers() {}
  // Full sharding: every parameter whole until the next step (collective over the data-parallel
  // groups, every replica at once), for whoever reads the stages between steps (sampling, a
  // parity check); a no-op where parameters are always whole.
  virtual void gather_whole_parameters() {}
  // Bytes of optimizer state this replica holds (sharded: its shards).
  virtual size_t optimizer_state_bytes() const = 0;
  // `stages`: the held stages' parameters (nullptr elsewhere). The default: whole arenas.
  virtual HeldBytes held_bytes(const std::vector<StageParameters*>& stages) const;
  // Full sharding: per device, the last run's gathers and reduce-scatters (count, seconds, and
  // the seconds the worker waited for them); empty in the other modes.
  virtual std::vector<ReductionStats> last_shard_stats() const { return {}; }
  // Asynchronous: the second weight version's bytes, and how old stage s's weights are.
  virtual size_t weight_stash_bytes() const { return 0; }
  virtual int stage_delay(int /*stage*/) const { return 0; }
};

// Full-layout optimizers for the stages held here (those without one get a new one).
void make_missing_optimizers(const UpdateContext& context,
                             std::vector<std::unique_ptr<Optimizer>>& optimizers);
// The bytes of the optimizers held.
size_t held_optimizer_bytes(const std::vector<std::unique_ptr<Optimizer>>& optimizers);

}  // namespace pt
