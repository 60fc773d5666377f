#pragma once
// What the training loop (engine/loop/fit.h) needs from a trainer, whether it runs the model on one
// device (Trainer, the reference) or as a pipeline over several (PipelineTrainer).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/train/stage_state.h"
#include "layers/model.h"

namespace pt {

struct StepStats {
  double loss = 0;      // mean over the global batch
  int64_t correct = 0;  // classification only (-1 otherwise)
  int64_t samples = 0;
  double grad_norm = 0;  // global L2 norm before clipping
  float lr = 0;
  bool skipped = false;  // non-finite gradients: the step was not applied
  // Device memory this process's devices hold from the system after the step (MemoryStats::
  // reserved_bytes, summed): flat from the second step on, or something leaks.
  size_t reserved_bytes = 0;
};

struct EvalStats {
  double loss = 0;  // mean over the data set
  double accuracy = -1;
  int64_t samples = 0;
};

// One global batch: host tensors inputs (B, ...) and targets (B, ...).
struct HostBatch {
  Tensor inputs, targets;
};

class TrainingEngine {
 public:
  virtual ~TrainingEngine() = default;
  // One optimizer step on one global batch; inputs (B, ...) and targets (B, ...) are host tensors.
  virtual StepStats train_step(const Tensor& inputs, const Tensor& targets) = 0;
  // Consecutive steps, batches[i] for step step() + i. An asynchronous pipeline (--update async)
  // runs them as one schedule, without a flush between the steps; by default one train_step each.
  virtual std::vector<StepStats> train_steps(std::span<const HostBatch> batches) {
    std::vector<StepStats> out;
    for (const HostBatch& b : batches) out.push_back(train_step(b.inputs, b.targets));
    return out;
  }
  // The most batches one train_steps call takes (the training loop collects up to this many).
  virtual int window() const { return 1; }
  // The median wall time of train_step over recent full-size steps (step_clock.h), what a
  // prediction of the whole step is compared with; 0 where the engine does not keep it.
  virtual double recent_step_seconds() const { return 0; }
  // Forward only, evaluation mode, over host tensors.
  virtual EvalStats evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk = 1000) = 0;
  virtual Model& model() const = 0;
  virtual uint64_t seed() const = 0;
  // Optimizer steps taken so far (the next step's index).
  virtual int64_t step() const = 0;
  virtual void set_step(int64_t step) = 0;
  // Every stage's parameters and optimizer held here, one copy of each, in stage order.
  virtual std::vector<StageState> stage_states() = 0;
  // Every copy of every stage held here (replicas in this process hold copies of the same
  // stages): what loading a checkpoint must fill.
  virtual std::vector<StageState> all_stage_copies() { return stage_states(); }
  // Called once a checkpoint was loaded into all_stage_copies(): an engine that keeps its state
  // in another form (sharded optimizers) takes it from there.
  virtual void stage_copies_loaded() {}
  // What this process writes into a checkpoint: its stages, unless another process holds the
  // same stages as replica 0 (replicas of a stage are written once).
  virtual std::vector<StageState> stages_to_save() { return stage_states(); }
  // Stop signals across processes that do not train in lockstep (asynchronous parameter-server
  // workers under mpirun, engine/parallel/parameter_server.h). The training loop's own check
  // (engine/process/preemption.h) covers the processes in lockstep with this one; beyond them:
  // peer_asked_to_stop(): another process's stop reached this engine (a server's reply said so).
  // agree_on_stop(stopping): called by the training loop wherever its processes would meet
  // anyway (before an evaluation or a save, at the end) and when it stops; returns the step that
  // every process trains to before the final save (the furthest one's, so that a checkpoint holds
  // the same number of steps from each) once any of them stops, else nothing. The processes meet
  // in the same order whatever their pace, so every call pairs with one on each other process.
  // Engines in lockstep: `stopping ? step() : nothing`, no communication.
  virtual bool peer_asked_to_stop() const { return false; }
  virtual std::optional<int64_t> agree_on_stop(bool stopping) {
    if (stopping) return step();
    return std::nullopt;
  }
};

// The global gradient norm over all stages: each parameter's sum of squares (double), added in
// global parameter order, so one device and any partition give the same bits.
double global_grad_norm(const std::vector<const StageParameters*>& stages);

// The same over a pipeline whose stages are spread over the processes of `group` (nullable:
// all stages are in `stages`): each process computes its tensors' sums of squares, they are
// exchanged, and every process adds all of them in global order — the same bits everywhere.
//
// Tensor parallelism (`tensor_group`, nullable: T = 1): the model holds rank t's slices; a split
// tensor's squares are summed over the T ranks, a replicated one counted once (rank 0's), so
// the norm is the whole model's (its bits differ from T = 1's: the squares of a tensor are
// added in slices).
double global_grad_norm(const std::vector<const StageParameters*>& stages, const Model& model,
                        Communicator* group, Communicator* tensor_group = nullptr);

}  // namespace pt
