#pragma once
// Pipeline-parallel training: the model's layers are split into stages (contiguous layer
// ranges), each stage lives on one device, and one worker thread per device executes that
// device's action list from the schedule — nothing else decides the order. This file is the
// orchestration; the parts are one idea each:
//   executor.h         the interpreter of one device's list (the one switch over action types)
//   transport.h        moving tensors between devices, of this process or of others
//   skip_routing.h     skip connections straight from the saving stage to the adding one
//   layout.h           which layers and skip edges each stage holds
//   pipeline_config.h  what the trainer is made from, checked before anything is allocated
//   engine/update/     what happens at a step's boundary and to a stage's gradients: the update
//                      strategy (flush + step epilogue, sharded optimizer, parameter server,
//                      PipeDream-2BW's asynchronous windows), chosen by update_choice.h
// Evaluation runs a forward-only schedule through the same executor.
//
// As one replica of R (config.parallel.replicas), it trains on its share of every global batch
// (micro-batches r*M .. r*M+M-1 of the batch cut into R*M); DataParallelTrainer
// (engine/replicas/) drives the replicas, the update strategy reduces their gradients.
//
// With a synchronous schedule this computes exactly single-device gradient accumulation over
// the same micro-batches (Trainer): same per-layer calls, same dW accumulation order.
#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "engine/pipeline/device_workers.h"
#include "engine/pipeline/executor.h"
#include "engine/pipeline/layout.h"
#include "engine/pipeline/pipeline_config.h"
#include "engine/pipeline/transport.h"
#include "engine/report/step_clock.h"
#include "engine/trace/flight_recorder.h"
#include "engine/train/training_engine.h"
#include "engine/update/update_strategy.h"
#include "schedule/schedule.h"

namespace pt {

// Which weight version a compute action of an asynchronous window used (for tests).
struct VersionUse {
  sched::Action action;
  int64_t step = 0;     // the micro-batch's step
  int64_t version = 0;  // W(version) was bound
};

class PipelineTrainer final : public TrainingEngine {
 public:
  // devices[d] runs the actions of schedule device d (nullptr: d runs in another process, see
  // ParallelContext::pipeline_group).
  PipelineTrainer(Model& model, std::vector<Backend*> devices, const PipelineConfig& config);
  ~PipelineTrainer() override;

  StepStats train_step(const Tensor& inputs, const Tensor& targets) override;
  std::vector<StepStats> train_steps(std::span<const HostBatch> batches) override;
  int window() const override { return std::max(update_->window(), 1); }
  EvalStats evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk = 1000) override;
  Model& model() const override { return *model_; }
  uint64_t seed() const override { return config_.trainer.seed; }
  int64_t step() const override { return step_; }
  void set_step(int64_t step) override;
  std::vector<StageState> stage_states() override;
  // Stage s's parameters and optimizer (both null when another process holds it).
  StageState stage_state(int s) {
    return {params_.at(static_cast<size_t>(s)).get(), update_->optimizer(s)};
  }

  int num_stages() const { return layout_.num_stages(); }
  StageParameters& stage_parameters(int s) { return *params_.at(static_cast<size_t>(s)); }
  const PipelineConfig& config() const { return config_; }
  // Whether the next steps record each action's times (last_trace()): the bubble report, --trace
  // and --timeline need them; the benchmarks switch it to measure what recording costs.
  void set_record_trace(bool on) { config_.record_trace = on; }
  // Actions executed in the last full-size step, per device (when record_trace): the latest step
  // whose batch was at least as large as every traced step's before it. An epoch's smaller
  // remainder batch does not replace it, so traces and measured bubbles describe a full step.
  const std::vector<std::vector<ExecutedAction>>& last_trace() const { return trace_; }
  // The index of the step last_trace() holds (-1 before any).
  int64_t last_trace_step() const { return traced_step_; }
  double recent_step_seconds() const override { return step_clock_.median_seconds(); }
  // Peak bytes of each device during the last step (0 for devices of other processes).
  std::vector<size_t> last_peak_bytes() const { return peak_bytes_; }
  // Asynchronous updates: the bytes of the second weight version on the devices held here, how
  // many steps old the weights are that stage s computes with (step t uses W(t - delay)), and
  // every compute action's version in the last train_steps call, per stage.
  size_t weight_stash_bytes() const { return update_->weight_stash_bytes(); }
  int stage_delay(int s) const { return update_->stage_delay(s); }
  const std::vector<std::vector<VersionUse>>& last_version_uses() const { return version_uses_; }
  // Whether this process computes the loss (holds the last stage).
  bool holds_last_stage() const;
  // The gradient reduction of each device held here in the last step (data parallelism).
  std::vector<ReductionStats> last_reduction_stats() const;
  // Bytes of optimizer state this replica's devices hold (sharded: their shards), and what they
  // would hold unsharded.
  size_t optimizer_state_bytes() const { return update_->optimizer_state_bytes(); }
  // What this replica holds between steps (parameters, gradients, optimizer state) and the
  // most gathered at once in the last step (full sharding).
  HeldBytes held_bytes() const;
  std::vector<ReductionStats> last_shard_stats() const { return update_->last_shard_stats(); }
  size_t unsharded_optimizer_state_bytes() const;
  // --shard-optimizer, --ps and checkpoints, which hold the unsharded state: stage_states()
  // reports no optimizer (a shard's or a parameter-server worker's stage) unless one of these
  // made a full one. gather_full_optimizers (collective over the data-parallel groups, every
  // replica at once) fills it from the shards, for saving; make_full_optimizers makes empty ones
  // for a checkpoint to load into (or, --ps, for the servers' state to be saved), and
  // take_full_optimizers then hands each shard its range and drops them (the next step does that
  // too, so a loader that does not call it loses nothing; a parameter-server worker's goes to
  // the servers and is dropped at its next step's pull). No-ops when neither.
  void gather_full_optimizers() { update_->gather_full_optimizers(); }
  void make_full_optimizers() { update_->make_full_optimizers(); }
  void take_full_optimizers() { update_->take_full_optimizers(); }
  void gather_whole_parameters() { update_->gather_whole_parameters(); }
  // The evaluation of rows [first, first + count), the loss divided by `divisor` (so shards
  // evaluated by several replicas add up); correct = -1 when the loss does not classify.
  struct EvalShare {
    double loss = 0;
    int64_t correct = 0;
  };
  EvalShare evaluate_rows(const Tensor& inputs, const Tensor& targets, int64_t first, int64_t count,
                          int64_t divisor, int64_t chunk);

 private:
  // K steps as one schedule run of the asynchronous update (window() > 0); ends drained.
  std::vector<StepStats> train_window(std::span<const HostBatch> batches);
  // Runs `schedule` on every device held here, each on its own thread; with `trace` records
  // every action's times (per device).
  void run_schedule(const sched::Schedule& schedule, ScheduleRun& run, bool training,
                    std::vector<std::vector<ExecutedAction>>* trace);
  // How the step epilogue reaches the stages held here: their devices' threads, other processes.
  EpilogueConfig epilogue(float lr);
  // This replica's micro-batches of a batch of `batch` rows, appended to `run` (checked first).
  void add_microbatches(ScheduleRun& run, int64_t batch, int64_t targets) const;
  void record_peaks();
  // Every device's action list with the action it was executing marked (for error messages).
  std::string progress(const sched::Schedule& schedule, const ScheduleRun& run) const;
  bool local(int device) const { return devices_[static_cast<size_t>(device)] != nullptr; }
  void record_action_lists(const sched::Schedule& schedule, FlightList list) const;
  // Schedule device d as the flight recorder numbers devices (replica * devices + d).
  int flight_device(int d) const;

  Model* model_;
  PipelineConfig config_;
  std::vector<Backend*> devices_;   // per schedule device; nullptr when in another process
  std::vector<int> local_devices_;  // the schedule devices held here (worker i runs the i-th)
  PipelineLayout layout_;
  std::vector<std::unique_ptr<StageParameters>> params_;  // per stage; null: another process's
  std::unique_ptr<UpdateStrategy> update_;
  std::unique_ptr<DeviceWorkers> workers_;
  std::unique_ptr<RoutedTransport> transport_;
  std::vector<std::vector<ExecutedAction>> trace_;
  int64_t traced_step_ = -1, traced_batch_ = 0;
  StepClock step_clock_;  // train_step's wall times (recent_step_seconds)
  std::vector<size_t> peak_bytes_;
  int64_t step_ = 0;
  int64_t runs_ = 0;  // schedule runs so far (the flight recorder's run numbers)
  std::vector<std::vector<VersionUse>> version_uses_;
};

}  // namespace pt
