#include "engine/pipeline/pipeline_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <thread>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/data/batching.h"
#include "engine/parallel/all_reduce_gradients.h"
#include "engine/parallel/parameter_server.h"
#include "engine/pipeline/async_update_limits.h"
#include "engine/pipeline/progress_grid.h"
#include "engine/step_epilogue.h"
#include "engine/tied_gradients.h"
#include "engine/trace/flight_recorder.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/validate.h"
#include "schedule/weight_delay.h"

namespace pt {

namespace {

size_t at(int i) { return static_cast<size_t>(i); }

// --update async with --dp R: UPDATE(k) of a stage sums the stage's gradient over the replicas
// in one all-reduce on the device's data-parallel group (the communicator and element-wise sum
// the synchronous GradientReducer uses; one call per stage, no buckets and no overlap with
// backward, since UPDATE comes after the stage's last backward of the step anyway).
void all_reduce_stage_gradients(StageParameters& params, Communicator& group, int stage,
                                int64_t step) {
  Tensor grads = params.grads_flat();
  const int64_t n = grads.numel();
  if (n == 0) return;
  Backend& b = params.backend();
  const std::string what =
      fmt::format("the gradient all-reduce of stage {} at the UPDATE of step {}", stage, step);
  b.synchronize();  // the backward work that produced the gradient
  std::vector<float> staging;
  all_reduce_gradients(b, group, grads.f32(), n, staging, what);
  b.synchronize();  // the copy back, when staged through the host
}

std::vector<std::string> action_texts(const std::vector<sched::Action>& actions) {
  std::vector<std::string> out;
  out.reserve(actions.size());
  for (const sched::Action& a : actions) out.push_back(a.str());
  return out;
}

std::vector<int64_t> first_rows(const std::vector<int64_t>& sizes, int64_t first) {
  std::vector<int64_t> out;
  for (int64_t n : sizes) {
    out.push_back(first);
    first += n;
  }
  return out;
}

}  // namespace

PipelineTrainer::PipelineTrainer(Model& model, std::vector<Backend*> devices,
                                 const PipelineConfig& config)
    : model_(&model), config_(config), devices_(std::move(devices)) {
  const sched::Schedule& sc = config_.schedule;
  const ParallelContext& par = config_.parallel;
  if (static_cast<int>(devices_.size()) != sc.num_devices)
    throw UsageError(fmt::format("the schedule has {} devices but {} were given", sc.num_devices,
                                 devices_.size()));
  layout_ = PipelineLayout::make(model, config_.layers_per_stage, sc.stage_device);
  if (sc.microbatches != config_.trainer.microbatches)
    throw UsageError(fmt::format("the schedule is for {} micro-batches but --microbatches is {}",
                                 sc.microbatches, config_.trainer.microbatches));
  if (!(config_.timeout_s > 0))
    throw UsageError(fmt::format("--timeout {} must be > 0 seconds", config_.timeout_s));
  if (par.replicas < 1 || par.replica < 0 || par.replica >= par.replicas)
    throw UsageError(fmt::format("replica {} of {} does not exist", par.replica, par.replicas));
  for (int d = 0; d < sc.num_devices; ++d) {
    if (!local(d)) continue;
    local_devices_.push_back(d);
    if (par.replicas > 1 && !par.data_parallel_group(d) && !par.uses_parameter_server())
      throw UsageError(fmt::format("replica {} of {} has no data-parallel group for device {}",
                                   par.replica, par.replicas, d));
  }
  if (local_devices_.empty())
    throw UsageError("none of the schedule's devices is held by this process");
  if (par.uses_parameter_server() && sc.num_devices != layout_.num_stages())
    throw UsageError(fmt::format(
        "--ps needs one stage per device (each stage's worker pushes its own layers) but the "
        "schedule puts {} stages on {} devices: use --schedule 1f1b or gpipe",
        layout_.num_stages(), sc.num_devices));
  if (static_cast<int>(local_devices_.size()) != sc.num_devices) {
    if (!par.pipeline_group)
      throw UsageError(
          "some schedule devices are in other processes (nullptr) but no pipeline communicator was "
          "given");
    if (par.pipeline_group->size() != sc.num_devices)
      throw UsageError(
          fmt::format("the pipeline communicator has {} ranks but the schedule has {} devices",
                      par.pipeline_group->size(), sc.num_devices));
  }
  if (par.shard_optimizer && par.replicas < 2)
    throw UsageError(fmt::format(
        "--shard-optimizer needs --dp R >= 2: it splits the optimizer state between data-parallel "
        "replicas and this run has {}; add --dp 2 (or more) or drop --shard-optimizer",
        par.replicas));
  if (config_.async_update) {
    check_async();  // before the shards' collectives
    stage_delays_ = async_stage_delays();
  }
  for (const StageRange& range : layout_.stages) {
    StageOwned owned;
    if (local(range.device)) {
      Backend& b = *devices_[at(range.device)];
      owned.params = std::make_unique<StageParameters>(model, range.first_layer, range.last_layer,
                                                       b, config_.trainer.seed);
      if (sharded())
        owned.shard = std::make_unique<StageShard>(
            *owned.params, model, *par.data_parallel_group(range.device), config_.trainer.optimizer,
            static_cast<int>(stages_.size()));
      // A parameter-server worker holds no optimizer state: its servers do.
      else if (!par.uses_parameter_server())
        owned.optimizer =
            std::make_unique<Optimizer>(config_.trainer.optimizer, b, owned.params->layout());
      if (config_.async_update)
        owned.versions = std::make_unique<WeightVersions>(
            model, *owned.params, step_, stage_delay(static_cast<int>(stages_.size())) > 0);
    }
    stages_.push_back(std::move(owned));
  }
  std::vector<Backend*> held;
  for (int d : local_devices_) held.push_back(devices_[at(d)]);
  workers_ = std::make_unique<DeviceWorkers>(held);
  transport_ =
      std::make_unique<RoutedTransport>(devices_, static_cast<int>(model.skip_edges().size()),
                                        &workers_->abort_flag(), par.pipeline_group);
  reducers_.resize(devices_.size());
  for (int d : local_devices_) {
    Communicator* group = par.replicas > 1 ? par.data_parallel_group(d) : nullptr;
    // sharded: the shards reduce-scatter after backward; async: each UPDATE all-reduces its own
    // stage (all_reduce_stage_gradients).
    if (!group || sharded() || config_.async_update) continue;
    std::vector<std::pair<int, StageParameters*>> held_stages;
    for (int s = 0; s < sc.num_stages; ++s)
      if (layout_.stage(s).device == d) held_stages.emplace_back(s, stages_[at(s)].params.get());
    reducers_[at(d)] = std::make_unique<GradientReducer>(*group, held_stages, par.bucket_bytes);
  }
  record_action_lists(sc, FlightList::training);
}

PipelineTrainer::~PipelineTrainer() = default;

// What asynchronous updates cannot do (yet), refused before anything runs.
void PipelineTrainer::check_async() const {
  const sched::Schedule& sc = config_.schedule;
  const int S = sc.num_stages, M = config_.trainer.microbatches;
  if (config_.async_window < 1)
    throw UsageError(fmt::format("--async-window {} must be >= 1 (steps per schedule run)",
                                 config_.async_window));
  if (S < 2)
    throw UsageError(
        "--update async needs --stages >= 2: on one stage there is no pipeline to keep full; use "
        "--update sync");
  if (sc.num_devices != S)
    throw UsageError("--update async runs 1F1B with one stage per device: use --schedule 1f1b");
  if (M < S - 1)
    throw UsageError(fmt::format(
        "--update async with --stages {} needs --microbatches >= {} (stages - 1) so that at most "
        "two weight versions are live; raise --microbatches",
        S, S - 1));
  refuse_unsupported_with_async(config_.trainer.clip_norm, false);
  if (config_.parallel.shard_optimizer)
    throw UsageError(
        "--shard-optimizer with --update async: each stage steps its whole optimizer at its own "
        "UPDATE; drop --shard-optimizer or use --update sync");
  if (config_.parallel.uses_parameter_server())
    throw UsageError(
        "--ps with --update async: the parameter servers apply the updates; drop --ps or use "
        "--update sync");
  for (const ParameterTie& tie : model_->ties())
    for (const ParamRef& m : tie.members)
      if (layout_.stage_of_layer(m.layer) != layout_.stage_of_layer(tie.members[0].layer))
        throw UsageError(fmt::format(
            "--update async: layers {} and {} share a tied parameter but are on stages {} and "
            "{}, which update on their own: untie them (pipetrain-gpt: --untied) or use --update "
            "sync",
            tie.members[0].layer, m.layer, layout_.stage_of_layer(tie.members[0].layer),
            layout_.stage_of_layer(m.layer)));
}

void PipelineTrainer::set_step(int64_t step) {
  step_ = step;
  for (StageOwned& s : stages_)
    if (s.versions) s.versions->set_latest(step);
}

int PipelineTrainer::stage_delay(int s) const { return stage_delays_.at(at(s)); }

// The delays the window's lists allow (two steps show the steady state; every window, however
// short, binds the same versions, so the trajectory does not depend on where windows are cut).
std::vector<int> PipelineTrainer::async_stage_delays() const {
  const sched::Schedule window =
      sched::one_f_one_b_async(config_.schedule.num_devices, config_.trainer.microbatches, /*K=*/2);
  std::vector<int> least;
  for (int s = 0; s < window.num_stages; ++s) least.push_back(sched::least_weight_delay(window, s));
  if (config_.async_delay == AsyncDelay::per_stage) return least;
  // uniform: every stage as old as the oldest (PipeDream-2BW's one step).
  return std::vector<int>(least.size(), *std::max_element(least.begin(), least.end()));
}

size_t PipelineTrainer::weight_stash_bytes() const {
  size_t n = 0;
  for (const StageOwned& s : stages_)
    if (s.versions) n += s.versions->extra_bytes();
  return n;
}

bool PipelineTrainer::holds_last_stage() const { return local(layout_.stages.back().device); }

std::vector<ReductionStats> PipelineTrainer::last_reduction_stats() const {
  std::vector<ReductionStats> out;
  for (const auto& r : reducers_)
    if (r) out.push_back(r->last_stats());
  return out;
}

size_t PipelineTrainer::optimizer_state_bytes() const {
  size_t bytes = 0;
  for (const StageOwned& s : stages_) {
    if (s.shard) bytes += s.shard->state_bytes();
    if (s.optimizer && !s.shard)
      for (const OptimizerSlot& slot : s.optimizer->slots()) bytes += slot.state.bytes();
  }
  return bytes;
}

size_t PipelineTrainer::unsharded_optimizer_state_bytes() const {
  size_t bytes = 0;
  for (const StageOwned& s : stages_)
    if (s.params)
      bytes += static_cast<size_t>(config_.trainer.optimizer.state_slots()) *
               s.params->layout().total_bytes();
  return bytes;
}

void PipelineTrainer::make_full_optimizers() {
  for (StageOwned& s : stages_)
    if (s.params && !s.optimizer)
      s.optimizer = std::make_unique<Optimizer>(config_.trainer.optimizer, s.params->backend(),
                                                s.params->layout());
}

void PipelineTrainer::gather_full_optimizers() {
  make_full_optimizers();
  for (StageOwned& s : stages_)
    if (s.shard) s.shard->gather_state(*s.optimizer);
}

void PipelineTrainer::take_full_optimizers() {
  for (StageOwned& s : stages_)
    if (s.shard && s.optimizer) {
      s.shard->take_state(*s.optimizer);
      s.optimizer.reset();
    }
}

std::vector<StageState> PipelineTrainer::stage_states() {
  std::vector<StageState> out;
  for (StageOwned& s : stages_)
    if (s.params) out.push_back({s.params.get(), s.optimizer.get()});
  return out;
}

std::string PipelineTrainer::progress(const sched::Schedule& schedule,
                                      const ScheduleRun& run) const {
  std::vector<DeviceProgress> grid;
  for (int d = 0; d < schedule.num_devices; ++d) {
    DeviceProgress p;
    if (!local(d)) {
      p.label = fmt::format("device {}", d);
      p.note = fmt::format("in another process (world rank {})",
                           config_.parallel.pipeline_group->world_rank(d));
    } else {
      p.label = fmt::format("device {} ({})", d, devices_[at(d)]->device().str());
      p.actions = action_texts(schedule.actions[at(d)]);
      p.position = run.position[at(d)].load();
    }
    grid.push_back(std::move(p));
  }
  return render_progress(grid);
}

// The flight recorder's copy of the lists this process's devices run (for pipetrain-hang).
void PipelineTrainer::record_action_lists(const sched::Schedule& schedule, FlightList list) const {
  for (int d : local_devices_)
    flight_recorder().set_action_list(
        {list, flight_device(d),
         fmt::format("replica {} device {} ({})", config_.parallel.replica, d,
                     devices_[at(d)]->device().str()),
         action_texts(schedule.actions[at(d)])});
}

int PipelineTrainer::flight_device(int d) const {
  return config_.parallel.replica * config_.schedule.num_devices + d;
}

void PipelineTrainer::run_schedule(const sched::Schedule& schedule, ScheduleRun& run, bool training,
                                   std::vector<std::vector<ExecutedAction>>* trace) {
  ExecutorSetup setup;
  setup.model = model_;
  for (StageOwned& s : stages_) setup.parameters.push_back(s.params.get());
  setup.layout = &layout_;
  setup.recompute = config_.recompute;
  setup.transport = transport_.get();
  setup.timeout_s = config_.timeout_s;
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
        GradientReducer* reducer = training ? reducers_[at(d)].get() : nullptr;
        Executor(setup, run, d, *devices_[at(d)], reducer)
            .run(schedule.actions[at(d)], trace ? &(*trace)[at(d)] : nullptr);
        if (reducer) reducer->finish();
        devices_[at(d)]->synchronize();
      },
      [this] { transport_->wake_all(); });
}

StepStats PipelineTrainer::train_step(const Tensor& inputs, const Tensor& targets) {
  if (config_.async_update) {
    const HostBatch one{inputs, targets};
    return train_steps({&one, 1}).at(0);
  }
  const auto started = std::chrono::steady_clock::now();
  const int64_t batch = inputs.shape()[0];
  if (targets.shape()[0] != batch)
    throw UsageError(
        fmt::format("a batch has {} inputs but {} targets", batch, targets.shape()[0]));
  const ParallelContext& par = config_.parallel;
  const int M = config_.trainer.microbatches;
  const int64_t parts = static_cast<int64_t>(par.replicas) * M;
  if (batch < parts)
    throw UsageError(
        fmt::format("a batch of {} samples cannot feed {} replica(s) x {} micro-batches: every "
                    "micro-batch needs at least one sample; raise --batch to >= {}",
                    batch, par.replicas, M, parts));
  ScheduleRun run(devices_.size());
  run.inputs = inputs;
  run.targets = targets;
  run.loss_divisor = batch;
  // The batch is cut into R*M micro-batches; replica r trains on micro-batches r*M .. r*M+M-1,
  // the same ones single-device accumulation over R*M micro-batches would see.
  const std::vector<int64_t> all_sizes = split_sizes(batch, parts);
  const std::vector<int64_t> all_first = first_rows(all_sizes, 0);
  const auto mine = static_cast<ptrdiff_t>(par.replica) * M;
  run.mb_size.assign(all_sizes.begin() + mine, all_sizes.begin() + mine + M);
  run.mb_first.assign(all_first.begin() + mine, all_first.begin() + mine + M);
  // Dropout masks are keyed by the global micro-batch index (replica r's m-th is r*M + m), so
  // replicas draw the masks single-device accumulation over R*M micro-batches would.
  run.info = StepInfo{config_.trainer.seed, step_, static_cast<int>(mine), true};

  for (StageOwned& s : stages_)
    if (s.params) s.params->start_gradients();
  // A checkpoint's full optimizer copy goes back into the shards (a loaded one must; a saved one
  // holds the shards' own values) and is dropped: it would be stale after this step.
  take_full_optimizers();
  for (int d : local_devices_) devices_[at(d)]->reset_peak();
  for (auto& r : reducers_)
    if (r) r->start_step();
  // A parameter-server worker computes on the servers' parameters (replica 0 sends its own
  // first). Every held stage sends before any waits: a server may hold layers of several.
  if (par.uses_parameter_server()) {
    std::vector<int> pulls;
    for (int s = 0; s < layout_.num_stages(); ++s)
      if (PsClient* c = par.parameter_server(s))
        if (c->begin_step(*stages_.at(at(s)).params, stages_.at(at(s)).optimizer.get(), step_))
          pulls.push_back(s);
    for (int s : pulls) par.parameter_server(s)->finish_pull(*stages_.at(at(s)).params);
    // A worker's optimizer existed only to carry a checkpoint's state to the servers (INIT, or
    // a save's FETCH): the servers hold it.
    for (StageOwned& s : stages_) s.optimizer.reset();
  }
  std::vector<std::vector<ExecutedAction>> executed;
  const auto computing = std::chrono::steady_clock::now();
  run_schedule(config_.schedule, run, /*training=*/true,
               config_.record_trace ? &executed : nullptr);
  for (StageOwned& s : stages_)
    if (s.params) s.params->finish_gradients();
  if (par.slow_factor > 1.0 &&
      par.replica ==
          par.slow_replica)  // --slow-worker: a straggler, (factor - 1) x its compute time
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
  peak_bytes_.assign(devices_.size(), 0);
  for (int d : local_devices_) peak_bytes_[at(d)] = devices_[at(d)]->memory_stats().peak_bytes;

  stats.lr = config_.trainer.lr.at(step_);
  EpilogueConfig epilogue;
  epilogue.clip_norm = config_.trainer.clip_norm;
  epilogue.lr = stats.lr;
  epilogue.pipeline_group = par.pipeline_group;
  epilogue.device_of_layer = [this](int layer) {
    return layout_.stage(layout_.stage_of_layer(layer)).device;
  };
  const std::vector<StageState> held = stage_states();
  epilogue.for_each_stage = [&](const std::function<void(size_t)>& job) {
    // Each stage's optimizer runs on its device's thread.
    workers_->run_on_all([&](int i) {
      for (size_t k = 0; k < held.size(); ++k)
        if (&held[k].params->backend() == devices_[at(local_devices_[at(i)])]) job(k);
      devices_[at(local_devices_[at(i)])]->synchronize();
    });
  };
  for (StageOwned& s : stages_)
    if (s.shard) epilogue.shards.push_back(s.shard.get());
  // With a parameter server the servers run the epilogue's maths; this replica pushes and pulls
  // (every held stage pushes before any pulls, as above).
  const EpilogueResult end =
      par.uses_parameter_server() ? exchange_with_servers() : finish_step(*model_, held, epilogue);
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

EpilogueResult PipelineTrainer::exchange_with_servers() {
  const ParallelContext& par = config_.parallel;
  for (int s = 0; s < layout_.num_stages(); ++s)
    if (PsClient* c = par.parameter_server(s)) c->push_gradients(*stages_.at(at(s)).params, step_);
  EpilogueResult end;
  for (int s = 0; s < layout_.num_stages(); ++s)
    if (PsClient* c = par.parameter_server(s)) {
      // Synchronous: every server sends the same global norm and skip; asynchronous: each its own.
      const EpilogueResult e = c->finish_pull(*stages_.at(at(s)).params);
      end.grad_norm = e.grad_norm;
      end.skipped = end.skipped || e.skipped;
    }
  return end;
}

std::vector<StepStats> PipelineTrainer::train_steps(std::span<const HostBatch> batches) {
  if (!config_.async_update) return TrainingEngine::train_steps(batches);
  version_uses_.assign(stages_.size(), {});
  std::vector<StepStats> out;
  for (size_t i = 0; i < batches.size(); i += static_cast<size_t>(config_.async_window)) {
    const auto n = std::min(batches.size() - i, static_cast<size_t>(config_.async_window));
    for (StepStats& st : train_window(batches.subspan(i, n))) out.push_back(st);
  }
  return out;
}

const sched::Schedule& PipelineTrainer::window_schedule(int steps) {
  auto it = window_schedules_.find(steps);
  if (it != window_schedules_.end()) return it->second;
  const sched::Schedule& sc = config_.schedule;
  sched::Schedule s = sched::add_communication(
      sched::one_f_one_b_async(sc.num_devices, config_.trainer.microbatches, steps));
  sched::require_valid(s);
  return window_schedules_.emplace(steps, std::move(s)).first->second;
}

// One schedule run over batches.size() steps: step t = step_ + k computes with W(t - 1) and each
// stage's UPDATE(k) applies its gradient (see weight_versions.h). Ends drained: every UPDATE ran.
std::vector<StepStats> PipelineTrainer::train_window(std::span<const HostBatch> batches) {
  const int M = config_.trainer.microbatches;
  const int K = static_cast<int>(batches.size());
  const ParallelContext& par = config_.parallel;
  const int64_t parts = static_cast<int64_t>(par.replicas) * M;
  const auto mine = static_cast<ptrdiff_t>(par.replica) * M;
  const sched::Schedule& schedule = window_schedule(K);
  record_action_lists(schedule, FlightList::training);
  ScheduleRun run(devices_.size());
  run.step_microbatches = M;
  for (int k = 0; k < K; ++k) {
    const HostBatch& b = batches[static_cast<size_t>(k)];
    const int64_t batch = b.inputs.shape()[0];
    if (b.targets.shape()[0] != batch)
      throw UsageError(
          fmt::format("a batch has {} inputs but {} targets", batch, b.targets.shape()[0]));
    if (batch < parts)
      throw UsageError(
          fmt::format("a batch of {} samples cannot feed {} replica(s) x {} micro-batches: raise "
                      "--batch to >= {}",
                      batch, par.replicas, M, parts));
    // As in train_step: replica r trains on micro-batches r*M .. r*M+M-1 of R*M.
    const std::vector<int64_t> sizes = split_sizes(batch, parts);
    const std::vector<int64_t> first = first_rows(sizes, 0);
    run.mb_size.insert(run.mb_size.end(), sizes.begin() + mine, sizes.begin() + mine + M);
    run.mb_first.insert(run.mb_first.end(), first.begin() + mine, first.begin() + mine + M);
    run.mb_step.insert(run.mb_step.end(), static_cast<size_t>(M), k);
    run.step_inputs.push_back(b.inputs);
    run.step_targets.push_back(b.targets);
    run.step_divisor.push_back(batch);
  }
  run.step_loss.assign(devices_.size(), std::vector<double>(static_cast<size_t>(K), 0.0));
  run.step_correct.assign(devices_.size(), std::vector<int64_t>(static_cast<size_t>(K), 0));
  // Dropout keyed by the global micro-batch index r*M + m, as in train_step.
  run.info = StepInfo{config_.trainer.seed, step_, static_cast<int>(mine), true};
  const int64_t t0 = step_;
  // Per step and stage: the stage's gradient norm at its UPDATE (each written by one thread).
  std::vector<std::vector<double>> norms(static_cast<size_t>(K),
                                         std::vector<double>(stages_.size(), 0.0));
  run.before_compute = [&](const sched::Action& a, int k) {
    const int64_t version = t0 + k - stage_delay(a.stage);  // W(t - 1) or W(t); W(-1) = W(0)
    stages_[at(a.stage)].versions->bind(version);
    version_uses_[at(a.stage)].push_back({a, t0 + k, version});
  };
  run.update = [&](int s, int k) {
    StageOwned& st = stages_[at(s)];
    st.params->finish_gradients();  // a layer without a weight gradient this step: zeros
    // Reduced before the ties are summed, the order of synchronous mode (reducer, then epilogue).
    if (par.replicas > 1)
      all_reduce_stage_gradients(*st.params, *par.data_parallel_group(layout_.stage(s).device), s,
                                 t0 + k);
    sum_tied_gradients(*model_, {st.params.get()});  // ties within the stage only (check_async)
    const double norm = global_grad_norm(std::vector<const StageParameters*>{st.params.get()});
    if (!std::isfinite(norm))
      throw std::runtime_error(fmt::format(
          "step {}: the gradients of stage {} (layers {}..{}) are not finite (norm {}); with "
          "--update async each stage updates on its own, so the run stops instead of skipping "
          "the step everywhere",
          t0 + k, s, st.params->first_layer(), st.params->last_layer() - 1, norm));
    norms[at(k)][at(s)] = norm;
    st.versions->update(*st.optimizer, config_.trainer.lr.at(t0 + k));
  };
  for (int d : local_devices_) devices_[at(d)]->reset_peak();
  std::vector<std::vector<ExecutedAction>> executed;
  run_schedule(schedule, run, /*training=*/true, config_.record_trace ? &executed : nullptr);
  for (StageOwned& s : stages_)
    if (s.versions) s.versions->bind(s.versions->latest());  // evaluation sees the latest
  if (config_.record_trace) {
    trace_ = std::move(executed);
    traced_step_ = t0;
  }
  peak_bytes_.assign(devices_.size(), 0);
  for (int d : local_devices_) peak_bytes_[at(d)] = devices_[at(d)]->memory_stats().peak_bytes;

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

EvalStats PipelineTrainer::evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk) {
  const int64_t n = inputs.shape()[0];
  const EvalShare share = evaluate_rows(inputs, targets, 0, n, n, chunk);
  EvalStats out;
  out.samples = n;
  out.loss = share.loss;
  out.accuracy =
      share.correct < 0 ? -1.0 : static_cast<double>(share.correct) / static_cast<double>(n);
  return out;
}

// Evaluation is a forward-only schedule with one micro-batch per chunk, lowered by the same pass
// as training and run by the same executor.
PipelineTrainer::EvalShare PipelineTrainer::evaluate_rows(const Tensor& inputs,
                                                          const Tensor& targets, int64_t first_row,
                                                          int64_t row_count, int64_t divisor,
                                                          int64_t chunk) {
  if (chunk < 1)
    throw UsageError(fmt::format("the evaluation chunk is {} rows; it must be >= 1", chunk));
  EvalShare out;
  if (row_count < 1) return out;
  ScheduleRun run(devices_.size());
  run.inputs = inputs;
  run.targets = targets;
  run.loss_divisor = divisor;
  for (int64_t first = first_row; first < first_row + row_count; first += chunk) {
    run.mb_first.push_back(first);
    run.mb_size.push_back(std::min(chunk, first_row + row_count - first));
  }
  run.info = StepInfo{config_.trainer.seed, step_, 0, false};
  const sched::Schedule& sc = config_.schedule;
  const sched::Schedule schedule = sched::add_communication(
      sched::forward_only(sc.stage_device, sc.num_devices, static_cast<int>(run.mb_size.size())));
  sched::ValidateOptions check;
  check.forward_only = true;
  sched::require_valid(schedule, check);
  record_action_lists(schedule, FlightList::evaluation);
  run_schedule(schedule, run, /*training=*/false, nullptr);
  if (!holds_last_stage()) return out;
  const int last = layout_.stages.back().device;
  out.loss = run.loss[at(last)];
  out.correct = run.correct[at(last)];
  return out;
}

}  // namespace pt
