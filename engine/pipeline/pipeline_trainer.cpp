#include "engine/pipeline/pipeline_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <thread>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/data/batching.h"
#include "engine/pipeline/update_choice.h"
#include "engine/trace/flight_recorder.h"

namespace pt {

namespace {

size_t at(int i) { return static_cast<size_t>(i); }

}  // namespace

PipelineTrainer::PipelineTrainer(Model& model, std::vector<Backend*> devices,
                                 const PipelineConfig& config)
    : model_(&model), config_(config), devices_(std::move(devices)) {
  const sched::Schedule& sc = config_.schedule;
  if (static_cast<int>(devices_.size()) != sc.num_devices)
    throw UsageError(fmt::format("the schedule has {} devices but {} were given", sc.num_devices,
                                 devices_.size()));
  layout_ = PipelineLayout::make(model, config_.layers_per_stage, sc.stage_device);
  local_devices_ = check_pipeline_config(config_, devices_, layout_);
  UpdateContext context;
  context.model = model_;
  context.trainer = config_.trainer;
  context.parallel = config_.parallel;
  context.num_devices = sc.num_devices;
  for (const StageRange& range : layout_.stages) {
    params_.push_back(local(range.device) ? std::make_unique<StageParameters>(
                                                model, range.first_layer, range.last_layer,
                                                *devices_[at(range.device)], config_.trainer.seed)
                                          : nullptr);
    context.stages.push_back(params_.back().get());
    context.stage_device.push_back(range.device);
    context.stage_first_layer.push_back(range.first_layer);
  }
  context.stage_first_layer.push_back(layout_.stages.back().last_layer);
  update_ = make_update_strategy(config_, context, step_);
  std::vector<Backend*> held;
  for (int d : local_devices_) held.push_back(devices_[at(d)]);
  workers_ = std::make_unique<DeviceWorkers>(held);
  transport_ =
      std::make_unique<RoutedTransport>(devices_, static_cast<int>(model.skip_edges().size()),
                                        &workers_->abort_flag(), config_.parallel.pipeline_group);
  record_action_lists(sc, FlightList::training);
}

PipelineTrainer::~PipelineTrainer() = default;

void PipelineTrainer::set_step(int64_t step) {
  step_ = step;
  update_->set_step(step);
}

bool PipelineTrainer::holds_last_stage() const { return local(layout_.stages.back().device); }

std::vector<ReductionStats> PipelineTrainer::last_reduction_stats() const {
  std::vector<ReductionStats> out;
  for (int d = 0; d < static_cast<int>(devices_.size()); ++d)
    if (const GradientReducer* r = update_->reducer(d)) out.push_back(r->last_stats());
  return out;
}

HeldBytes PipelineTrainer::held_bytes() const {
  std::vector<StageParameters*> stages;
  for (const auto& p : params_) stages.push_back(p.get());
  return update_->held_bytes(stages);
}

size_t PipelineTrainer::unsharded_optimizer_state_bytes() const {
  size_t bytes = 0;
  for (const auto& p : params_)
    if (p)
      bytes +=
          static_cast<size_t>(config_.trainer.optimizer.state_slots()) * p->layout().total_bytes();
  return bytes;
}

std::vector<StageState> PipelineTrainer::stage_states() {
  std::vector<StageState> out;
  for (int s = 0; s < num_stages(); ++s)
    if (params_[at(s)]) out.push_back(stage_state(s));
  return out;
}

void PipelineTrainer::run_schedule(const sched::Schedule& schedule, ScheduleRun& run, bool training,
                                   std::vector<std::vector<ExecutedAction>>* trace) {
  ExecutorSetup setup;
  setup.model = model_;
  for (const auto& p : params_) setup.parameters.push_back(p.get());
  setup.layout = &layout_;
  setup.recompute = config_.recompute;
  setup.transport = transport_.get();
  setup.timeout_s = config_.timeout_s;
  const ParallelContext& par = config_.parallel;
  setup.forwards_take_turns = par.tensor_parallel > 1 && par.tensor_parallel_overlap &&
                              par.tensor_parallel_overlap_forwards;
  setup.progress = [&](const ScheduleRun& r) { return progress(schedule, r); };
  setup.flight_list = training ? FlightList::training : FlightList::evaluation;
  setup.flight_device_base = flight_device(0);
  flight_recorder().set_run(runs_++, step_);
  transport_->start_run(schedule.num_stages, schedule.microbatches);
  if (trace) trace->assign(devices_.size(), {});
  run.start = ScheduleRun::Clock::now();
  workers_->run_on_all(
      [&](int i) {
        const int d = local_devices_[at(i)];
        GradientReducer* reducer = training ? update_->reducer(d) : nullptr;
        Executor(setup, run, d, *devices_[at(d)], reducer, update_->residency(d))
            .run(schedule.actions[at(d)], trace ? &(*trace)[at(d)] : nullptr);
        if (reducer) reducer->finish();
        devices_[at(d)]->synchronize();
      },
      [this] { transport_->wake_all(); });
}

// The batch is cut into R*M micro-batches; replica r trains on micro-batches r*M .. r*M+M-1,
// the same ones single-device accumulation over R*M micro-batches would see.
void PipelineTrainer::add_microbatches(ScheduleRun& run, int64_t batch, int64_t targets) const {
  const ParallelContext& par = config_.parallel;
  const int M = config_.trainer.microbatches;
  const int64_t parts = static_cast<int64_t>(par.replicas) * M;
  if (targets != batch)
    throw UsageError(fmt::format("a batch has {} inputs but {} targets", batch, targets));
  if (batch < parts)
    throw UsageError(
        fmt::format("a batch of {} samples cannot feed {} replica(s) x {} micro-batches: every "
                    "micro-batch needs at least one sample; raise --batch to >= {}",
                    batch, par.replicas, M, parts));
  const std::vector<int64_t> sizes = split_sizes(batch, parts);
  const auto mine = static_cast<ptrdiff_t>(par.replica) * M;
  int64_t first = 0;
  for (ptrdiff_t i = 0; i < mine + M; ++i) {
    if (i >= mine) {
      run.mb_size.push_back(sizes[static_cast<size_t>(i)]);
      run.mb_first.push_back(first);
    }
    first += sizes[static_cast<size_t>(i)];
  }
  // Dropout masks are keyed by the global micro-batch index (replica r's m-th is r*M + m), so
  // replicas draw the masks single-device accumulation over R*M micro-batches would.
  run.info = StepInfo{config_.trainer.seed, step_, static_cast<int>(mine), true};
}

void PipelineTrainer::record_peaks() {
  peak_bytes_.assign(devices_.size(), 0);
  for (int d : local_devices_) peak_bytes_[at(d)] = devices_[at(d)]->memory_stats().peak_bytes;
}

EpilogueConfig PipelineTrainer::epilogue(float lr) {
  EpilogueConfig epilogue;
  epilogue.clip_norm = config_.trainer.clip_norm;
  epilogue.lr = lr;
  epilogue.pipeline_group = config_.parallel.pipeline_group;
  epilogue.tensor_parallel_group = config_.parallel.tensor_parallel_group;
  epilogue.device_of_layer = [this](int layer) {
    return layout_.stage(layout_.stage_of_layer(layer)).device;
  };
  std::vector<Backend*> stage_devices;  // the held stages', in stage order
  for (const auto& p : params_)
    if (p) stage_devices.push_back(&p->backend());
  epilogue.for_each_stage = [this, stage_devices](const std::function<void(size_t)>& job) {
    // Each stage's optimizer runs on its device's thread.
    workers_->run_on_all([&](int i) {
      Backend* device = devices_[at(local_devices_[at(i)])];
      for (size_t k = 0; k < stage_devices.size(); ++k)
        if (stage_devices[k] == device) job(k);
      device->synchronize();
    });
  };
  return epilogue;
}

StepStats PipelineTrainer::train_step(const Tensor& inputs, const Tensor& targets) {
  if (update_->window() > 0) {
    const HostBatch one{inputs, targets};
    return train_steps({&one, 1}).at(0);
  }
  const auto started = std::chrono::steady_clock::now();
  const int64_t batch = inputs.shape()[0];
  ScheduleRun run(devices_.size());
  run.inputs = inputs;
  run.targets = targets;
  run.loss_divisor = batch;
  add_microbatches(run, batch, targets.shape()[0]);

  for (const auto& p : params_)
    if (p) p->start_gradients();
  update_->begin_step(step_);
  for (int d : local_devices_) devices_[at(d)]->reset_peak();
  std::vector<std::vector<ExecutedAction>> executed;
  const auto computing = std::chrono::steady_clock::now();
  run_schedule(config_.schedule, run, /*training=*/true,
               config_.record_trace ? &executed : nullptr);
  for (const auto& p : params_)
    if (p) p->finish_gradients();
  const ParallelContext& par = config_.parallel;
  if (par.slow_factor > 1.0 && par.replica == par.slow_replica)
    // --slow-worker: a straggler, (factor - 1) x its compute time
    std::this_thread::sleep_for((std::chrono::steady_clock::now() - computing) *
                                (par.slow_factor - 1.0));
  if (config_.record_trace && batch >= traced_batch_) {
    trace_ = std::move(executed);
    traced_batch_ = batch;
    traced_step_ = step_;
  }

  StepStats stats;
  stats.samples = batch;
  // The loss is computed on the device of the last stage; add the devices' shares in order.
  for (double loss : run.loss) stats.loss += loss;
  stats.correct = run.correct[at(layout_.stages.back().device)];
  record_peaks();
  stats.lr = config_.trainer.lr.at(step_);
  const EpilogueResult end = update_->end_step(step_, epilogue(stats.lr));
  stats.grad_norm = end.grad_norm;
  stats.skipped = end.skipped;
  for (int d : local_devices_)
    stats.reserved_bytes += devices_[at(d)]->memory_stats().reserved_bytes;
  step_clock_.record(
      step_, batch,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  ++step_;
  return stats;
}

std::vector<StepStats> PipelineTrainer::train_steps(std::span<const HostBatch> batches) {
  const auto K = static_cast<size_t>(update_->window());
  if (K == 0) return TrainingEngine::train_steps(batches);
  version_uses_.assign(params_.size(), {});
  std::vector<StepStats> out;
  for (size_t i = 0; i < batches.size(); i += K)
    for (StepStats& st : train_window(batches.subspan(i, std::min(batches.size() - i, K))))
      out.push_back(st);
  return out;
}

// One schedule run over batches.size() steps: step t = step_ + k computes with the weight
// version the update strategy binds, and each stage's UPDATE(k) applies its gradient.
std::vector<StepStats> PipelineTrainer::train_window(std::span<const HostBatch> batches) {
  const int M = config_.trainer.microbatches;
  const int K = static_cast<int>(batches.size());
  const sched::Schedule& schedule = update_->window_schedule(K);
  record_action_lists(schedule, FlightList::training);
  ScheduleRun run(devices_.size());
  run.step_microbatches = M;
  for (int k = 0; k < K; ++k) {
    const HostBatch& b = batches[static_cast<size_t>(k)];
    const int64_t batch = b.inputs.shape()[0];
    add_microbatches(run, batch, b.targets.shape()[0]);  // as in train_step
    run.mb_step.insert(run.mb_step.end(), static_cast<size_t>(M), k);
    run.step_inputs.push_back(b.inputs);
    run.step_targets.push_back(b.targets);
    run.step_divisor.push_back(batch);
  }
  run.step_loss.assign(devices_.size(), std::vector<double>(static_cast<size_t>(K), 0.0));
  run.step_correct.assign(devices_.size(), std::vector<int64_t>(static_cast<size_t>(K), 0));
  const int64_t t0 = step_;
  // Per step and stage: the stage's gradient norm at its UPDATE (each written by one thread).
  std::vector<std::vector<double>> norms(static_cast<size_t>(K),
                                         std::vector<double>(params_.size(), 0.0));
  run.before_compute = [&](const sched::Action& a, int k) {
    const int64_t version = update_->before_compute(a, t0 + k);
    version_uses_[at(a.stage)].push_back({a, t0 + k, version});
  };
  run.update = [&](int s, int k) { norms[at(k)][at(s)] = update_->update(s, t0 + k); };
  for (int d : local_devices_) devices_[at(d)]->reset_peak();
  std::vector<std::vector<ExecutedAction>> executed;
  run_schedule(schedule, run, /*training=*/true, config_.record_trace ? &executed : nullptr);
  update_->end_window();
  if (config_.record_trace) {
    trace_ = std::move(executed);
    traced_step_ = t0;
  }
  record_peaks();

  std::vector<StepStats> out;
  const auto last = at(layout_.stages.back().device);
  for (int k = 0; k < K; ++k) {
    StepStats stats;
    stats.samples = run.step_divisor[at(k)];
    stats.loss = run.step_loss[last][at(k)];
    stats.correct = run.step_correct[last][at(k)];
    stats.lr = config_.trainer.lr.at(t0 + k);
    // The stages' own norms combined (the stages held here; no global norm is taken).
    double sq = 0;
    for (double n : norms[at(k)]) sq += n * n;
    stats.grad_norm = std::sqrt(sq);
    for (int d : local_devices_)
      stats.reserved_bytes += devices_[at(d)]->memory_stats().reserved_bytes;
    out.push_back(stats);
  }
  step_ += K;
  return out;
}

}  // namespace pt
