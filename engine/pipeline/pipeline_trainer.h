#pragma once
// Pipeline-parallel training: the model's layers are split into stages (contiguous layer
// ranges), each stage lives on one device, and one worker thread per device executes that
// device's action list from the schedule — nothing else decides the order. Transfers between
// devices of this process copy into the receiving device's memory and go through its mailbox;
// transfers to devices of other processes go through the pipeline communicator
// (config.parallel). After the lists ran, the gradient norm is taken over all stages (global
// clipping and the inf/NaN check) and every stage's optimizer steps on its own device.
//
// As one replica of R (config.parallel.replicas), it trains on its share of every global batch
// (micro-batches r*M .. r*M+M-1 of the batch cut into R*M) and all-reduces each device's
// gradients with the same device of the other replicas, in buckets that start while backward
// still runs (engine/parallel/gradient_reducer.h). DataParallelTrainer drives the replicas.
//
// With a synchronous schedule this computes exactly single-device gradient accumulation over
// the same micro-batches (Trainer): same per-layer calls, same dW accumulation order.
#include <chrono>
#include <memory>
#include <vector>

#include "engine/pipeline/device_workers.h"
#include "engine/pipeline/mailbox.h"
#include "engine/parallel/gradient_reducer.h"
#include "engine/parallel/parallel_context.h"
#include "engine/pipeline/recompute.h"
#include "engine/trainer.h"
#include "schedule/schedule.h"
#include "schedule/timed_action.h"

namespace pt {

struct PipelineConfig {
  TrainerConfig trainer;              // M, seed, optimizer, LR schedule, clipping
  sched::Schedule schedule;           // lowered (with SEND/RECV) and validated
  std::vector<int> layers_per_stage;  // size = schedule.num_stages; sums to the model's layers
  RecomputePolicy recompute;
  double timeout_s = 60;              // every wait for a peer gives up after this long
  bool record_trace = false;
  ParallelContext parallel;           // replicas and other processes (default: none)
};

// One executed action, for traces and measured bubbles (times from the step's start).
using ExecutedAction = sched::TimedAction;

class PipelineTrainer final : public TrainingEngine {
 public:
  // devices[d] runs the actions of schedule device d (nullptr: d runs in another process, see
  // ParallelContext::pipeline_group).
  PipelineTrainer(Model& model, std::vector<Backend*> devices, const PipelineConfig& config);
  ~PipelineTrainer() override;

  StepStats train_step(const Tensor& inputs, const Tensor& targets) override;
  EvalStats evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk = 1000) override;
  Model& model() const override { return *model_; }
  uint64_t seed() const override { return config_.trainer.seed; }
  int64_t step() const override { return step_; }
  void set_step(int64_t step) override { step_ = step; }
  std::vector<StageState> stage_states() override;

  int num_stages() const { return static_cast<int>(stages_.size()); }
  StageParameters& stage_parameters(int s) { return *stages_[static_cast<size_t>(s)].params; }
  const PipelineConfig& config() const { return config_; }
  // Actions executed in the last step, per device (when record_trace).
  const std::vector<std::vector<ExecutedAction>>& last_trace() const { return trace_; }
  // Peak bytes of each device during the last step (0 for devices of other processes).
  std::vector<size_t> last_peak_bytes() const { return peak_bytes_; }
  // Whether this process computes the loss (holds the last stage).
  bool holds_last_stage() const;
  // The gradient reduction of each device held here in the last step (data parallelism).
  std::vector<ReductionStats> last_reduction_stats() const;
  // The evaluation of rows [first, first + count), the loss divided by `divisor` (so shards
  // evaluated by several replicas add up); correct = -1 when the loss does not classify.
  struct EvalShare {
    double loss = 0;
    int64_t correct = 0;
  };
  EvalShare evaluate_rows(const Tensor& inputs, const Tensor& targets, int64_t first, int64_t count,
                          int64_t divisor, int64_t chunk);

 private:
  struct Stage {
    int first_layer, last_layer, device;
    std::unique_ptr<StageParameters> params;
    std::unique_ptr<Optimizer> optimizer;
  };
  struct StepData;  // one step's shared state (host batch, micro-batch offsets, results)
  class DeviceExecutor;
  // Every device's action list with the action it was executing marked (for error messages).
  std::string grid(const StepData& data) const;

  const Stage& stage_of_layer(int layer) const;
  int stage_index_of_layer(int layer) const;
  bool local(int device) const { return devices_[static_cast<size_t>(device)] != nullptr; }

  Model* model_;
  PipelineConfig config_;
  std::vector<Backend*> devices_;   // per schedule device; nullptr when in another process
  std::vector<int> local_devices_;  // the schedule devices held here (worker i runs local_devices_[i])
  std::vector<Stage> stages_;
  std::vector<std::unique_ptr<GradientReducer>> reducers_;  // per schedule device (data parallelism)
  // Per stage: the skip edges (indices into Model::skip_edges) it adds from / saves for another stage.
  std::vector<std::vector<size_t>> skips_in_, skips_out_;
  std::vector<std::unique_ptr<Mailbox>> mailboxes_;  // per device
  std::unique_ptr<DeviceWorkers> workers_;
  std::vector<std::vector<ExecutedAction>> trace_;
  std::vector<size_t> peak_bytes_;
  int64_t step_ = 0;
};

}  // namespace pt
