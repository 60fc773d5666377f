#pragma once
// Pipeline-parallel training: the model's layers are split into stages (contiguous layer
// ranges), each stage lives on one device, and one worker thread per device executes that
// device's action list from the schedule — nothing else decides the order. This file is the
// orchestration; the parts are one idea each:
//   executor.h      the interpreter of one device's list (the one switch over action types)
//   transport.h     moving tensors between devices, of this process or of others
//   skip_routing.h  skip connections straight from the saving stage to the adding one
//   layout.h        which layers and skip edges each stage holds
//   ../step_epilogue.h  tied gradients, global norm, clipping, optimizer step (as Trainer)
// Evaluation runs a forward-only schedule through the same executor.
//
// As one replica of R (config.parallel.replicas), it trains on its share of every global batch
// (micro-batches r*M .. r*M+M-1 of the batch cut into R*M) and all-reduces each device's
// gradients with the same device of the other replicas, in buckets that start while backward
// still runs (engine/parallel/gradient_reducer.h). DataParallelTrainer drives the replicas.
//
// With --update async (PipelineConfig::async_update) it runs PipeDream-2BW instead: train_steps
// runs up to async_window steps as one schedule (schedule/one_f_one_b_async: 1F1B without a flush
// between the steps), step t's micro-batches compute with W(t - 1) forward and backward (two
// versions per stage, weight_versions.h), and each stage applies its own UPDATE as soon as its
// gradient of a step is complete: W(t + 1) = W(t) - lr * update(g(W(t - 1))). With
// async_delay = per_stage the last stage computes with W(t) instead (stage_delay). No global
// norm, no clipping; tied parameters must sit on one stage; with --dp R each UPDATE all-reduces.
//
// With a synchronous schedule this computes exactly single-device gradient accumulation over
// the same micro-batches (Trainer): same per-layer calls, same dW accumulation order.
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "engine/parallel/gradient_reducer.h"
#include "engine/parallel/optimizer_shards.h"
#include "engine/parallel/parallel_context.h"
#include "engine/pipeline/async_delay.h"
#include "engine/pipeline/device_workers.h"
#include "engine/pipeline/executor.h"
#include "engine/pipeline/layout.h"
#include "engine/pipeline/recompute.h"
#include "engine/pipeline/transport.h"
#include "engine/pipeline/weight_versions.h"
#include "engine/step_clock.h"
#include "engine/step_epilogue.h"
#include "engine/trace/flight_recorder.h"
#include "engine/trainer.h"
#include "schedule/schedule.h"

namespace pt {

struct PipelineConfig {
  TrainerConfig trainer;              // M, seed, optimizer, LR schedule, clipping
  sched::Schedule schedule;           // lowered (with SEND/RECV) and validated
  std::vector<int> layers_per_stage;  // size = schedule.num_stages; sums to the model's layers
  RecomputePolicy recompute;
  double timeout_s = 60;  // every wait for a peer gives up after this long
  bool record_trace = false;
  ParallelContext parallel;  // replicas and other processes (default: none)
  // PipeDream-2BW (see above); `schedule` must then be 1F1B's. The window: steps per schedule run.
  bool async_update = false;
  int async_window = 8;
  AsyncDelay async_delay = AsyncDelay::uniform;
};

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
  int window() const override { return config_.async_update ? config_.async_window : 1; }
  EvalStats evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk = 1000) override;
  Model& model() const override { return *model_; }
  uint64_t seed() const override { return config_.trainer.seed; }
  int64_t step() const override { return step_; }
  void set_step(int64_t step) override;
  std::vector<StageState> stage_states() override;
  // Stage s's parameters and optimizer (both null when another process holds it).
  StageState stage_state(int s) {
    StageOwned& o = stages_.at(static_cast<size_t>(s));
    return {o.params.get(), o.optimizer.get()};
  }

  int num_stages() const { return layout_.num_stages(); }
  StageParameters& stage_parameters(int s) { return *stages_.at(static_cast<size_t>(s)).params; }
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
  // Asynchronous updates: the bytes of the second weight version on the devices held here, and
  // every compute action's version in the last train_steps call, per stage.
  size_t weight_stash_bytes() const;
  // Asynchronous updates: how many steps old the weights are that stage s computes with (step t
  // uses W(t - delay)): 1, or 0 on the last stage with AsyncDelay::per_stage
  // (sched::least_weight_delay of the window's lists).
  int stage_delay(int s) const;
  const std::vector<std::vector<VersionUse>>& last_version_uses() const { return version_uses_; }
  // Whether this process computes the loss (holds the last stage).
  bool holds_last_stage() const;
  // The gradient reduction of each device held here in the last step (data parallelism).
  std::vector<ReductionStats> last_reduction_stats() const;
  // Bytes of optimizer state this replica's devices hold (sharded: their shards), and what they
  // would hold unsharded.
  size_t optimizer_state_bytes() const;
  size_t unsharded_optimizer_state_bytes() const;
  // --shard-optimizer, --ps and checkpoints, which hold the unsharded state: stage_states()
  // reports no optimizer (a shard's or a parameter-server worker's stage) unless one of these
  // made a full one. gather_full_optimizers (collective over the data-parallel groups, every
  // replica at once) fills it from the shards, for saving; make_full_optimizers makes empty ones
  // for a checkpoint to load into (or, --ps, for the servers' state to be saved), and
  // take_full_optimizers then hands each shard its range and drops them (the next step does that
  // too, so a loader that does not call it loses nothing; a parameter-server worker's goes to
  // the servers and is dropped at its next step's pull). No-ops when neither.
  void gather_full_optimizers();
  void make_full_optimizers();
  void take_full_optimizers();
  // The evaluation of rows [first, first + count), the loss divided by `divisor` (so shards
  // evaluated by several replicas add up); correct = -1 when the loss does not classify.
  struct EvalShare {
    double loss = 0;
    int64_t correct = 0;
  };
  EvalShare evaluate_rows(const Tensor& inputs, const Tensor& targets, int64_t first, int64_t count,
                          int64_t divisor, int64_t chunk);

 private:
  // The optimizer state of a stage held here (both null for a stage of another process).
  struct StageOwned {
    std::unique_ptr<StageParameters> params;
    std::unique_ptr<Optimizer> optimizer;      // sharded: only while a checkpoint needs it
    std::unique_ptr<StageShard> shard;         // --shard-optimizer
    std::unique_ptr<WeightVersions> versions;  // asynchronous updates only
  };
  bool sharded() const { return config_.parallel.shard_optimizer; }
  void check_async() const;
  std::vector<int> async_stage_delays() const;
  // --ps: every held stage pushes its gradients, then pulls its parameters (the servers run the
  // epilogue's maths).
  EpilogueResult exchange_with_servers();
  std::vector<StepStats> train_window(std::span<const HostBatch> batches);
  const sched::Schedule& window_schedule(int steps);
  // Runs `schedule` on every device held here, each on its own thread; with `trace` records
  // every action's times (per device).
  void run_schedule(const sched::Schedule& schedule, ScheduleRun& run, bool training,
                    std::vector<std::vector<ExecutedAction>>* trace);
  // Every device's action list with the action it was executing marked (for error messages).
  std::string progress(const sched::Schedule& schedule, const ScheduleRun& run) const;
  bool local(int device) const { return devices_[static_cast<size_t>(device)] != nullptr; }
  void record_action_lists(const sched::Schedule& schedule, FlightList list) const;
  // Schedule device d as the flight recorder numbers devices (replica * devices + d).
  int flight_device(int d) const;

  Model* model_;
  PipelineConfig config_;
  std::vector<Backend*> devices_;  // per schedule device; nullptr when in another process
  std::vector<int>
      local_devices_;  // the schedule devices held here (worker i runs local_devices_[i])
  PipelineLayout layout_;
  std::vector<StageOwned> stages_;  // per stage
  std::vector<std::unique_ptr<GradientReducer>>
      reducers_;  // per schedule device (data parallelism)
  std::unique_ptr<DeviceWorkers> workers_;
  std::unique_ptr<RoutedTransport> transport_;
  std::vector<std::vector<ExecutedAction>> trace_;
  int64_t traced_step_ = -1, traced_batch_ = 0;
  StepClock step_clock_;  // train_step's wall times (recent_step_seconds)
  std::vector<size_t> peak_bytes_;
  int64_t step_ = 0;
  int64_t runs_ = 0;  // schedule runs so far (the flight recorder's run numbers)
  std::map<int, sched::Schedule> window_schedules_;  // asynchronous: lowered, per window length
  std::vector<std::vector<VersionUse>> version_uses_;
  std::vector<int> stage_delays_;  // asynchronous updates: per stage (stage_delay)
};

}  // namespace pt
