#include "engine/pipeline/pipeline_trainer.h"

#include <atomic>
#include <cmath>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/data/batching.h"
#include "engine/pipeline/remote_transfer.h"
#include "engine/tied_gradients.h"

namespace pt {

using sched::Action;
using sched::ActionType;
using Clock = std::chrono::steady_clock;

// ---- one step's shared state -------------------------------------------------------------------

struct PipelineTrainer::StepData {
  Tensor inputs, targets;              // host (B, ...)
  int64_t global_batch = 0;            // B
  std::vector<int64_t> mb_first, mb_size;  // rows of each micro-batch
  StepInfo info_base;
  std::vector<double> loss;            // per device: sum of the loss shares it computed
  std::vector<int64_t> correct;        // per device (-1: not a classification loss)
  std::vector<std::atomic<int>> position;  // per device: index of the action being executed
  Clock::time_point start;

  explicit StepData(size_t devices) : loss(devices, 0.0), correct(devices, 0), position(devices) {}
};

// ---- the interpreter of one device's action list -----------------------------------------------

class PipelineTrainer::DeviceExecutor {
 public:
  DeviceExecutor(PipelineTrainer& t, StepData& data, int device)
      : t_(t),
        data_(data),
        device_(device),
        backend_(*t.devices_[static_cast<size_t>(device)]),
        reducer_(t.reducers_[static_cast<size_t>(device)].get()) {}

  void run(const std::vector<Action>& actions, std::vector<ExecutedAction>* trace) {
    for (size_t i = 0; i < actions.size(); ++i) {
      data_.position[static_cast<size_t>(device_)] = static_cast<int>(i);
      const auto t0 = Clock::now();
      execute(actions[i]);
      if (trace) {
        backend_.synchronize();
        trace->push_back({actions[i], micros(t0), micros(Clock::now())});
      }
    }
    data_.position[static_cast<size_t>(device_)] = static_cast<int>(actions.size());
    for (auto& p : pending_sends_) p->wait(fmt::format("the completion of device {}'s sends to other processes", device_));
    pending_sends_.clear();
    if (!states_.empty())
      throw std::logic_error(fmt::format("device {} finished its actions with {} micro-batch states still "
                                         "held: the schedule is missing a backward", device_, states_.size()));
  }

 private:
  // What one (stage, micro-batch) holds between its actions on this device.
  struct State {
    StepInfo info;
    std::vector<LayerContext> ctx;       // per layer of the stage, then the loss (last stage)
    std::vector<Tensor> segment_inputs;  // input of each recomputed segment
    std::vector<Tensor> dy;              // per layer: the gradient its W needs
    SkipBoard skips;                     // skip connections' activations and gradients
    Tensor input, output, grad_output, grad_input;
    bool weights_pending = false;        // I done, W not yet
    bool backward_done = false;          // B, or I and W, done
  };

  double micros(Clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - data_.start).count();
  }

  const Stage& stage(int s) const { return t_.stages_.at(static_cast<size_t>(s)); }
  bool is_last(int s) const { return s == t_.num_stages() - 1; }

  State& state(int s, int m) {
    auto& p = states_[{s, m}];
    if (!p) {
      p = std::make_unique<State>();
      p->info = data_.info_base;
      p->info.microbatch = m;
      const Stage& st = stage(s);
      const int layers = st.last_layer - st.first_layer;
      p->ctx.reserve(static_cast<size_t>(layers) + 1);
      for (int l = st.first_layer; l <= st.last_layer; ++l)  // +1: the loss context
      {
        p->ctx.emplace_back(backend_, p->info, static_cast<uint64_t>(l));
        p->ctx.back().set_skips(&p->skips);
      }
      p->dy.resize(static_cast<size_t>(layers));
    }
    return *p;
  }

  void release(int s, int m) { states_.erase({s, m}); }

  [[noreturn]] void fail_wait(const Action& a, const std::string& what) {
    throw TimeoutError(fmt::format(
        "device {} ({}) waited {} s in action {} for {}: the peer is stalled, dead or the schedule does "
        "not match; raise --timeout if the peer is only slow\n{}",
        device_, backend_.device().str(), t_.config_.timeout_s, a.str(), what, t_.grid(data_)));
  }

  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t_.config_.timeout_s));
  }

  Communicator& pipeline_group() const { return *t_.config_.parallel.pipeline_group; }
  // Message tags between processes (0 when every device is in this process: no tags are used).
  int tag(Direction dir, int receiving_stage, int microbatch) const {
    if (!t_.config_.parallel.pipeline_group) return 0;
    return transfer_tag(dir == Direction::forward ? TransferKind::activation : TransferKind::gradient,
                        receiving_stage, microbatch, t_.num_stages(), pipeline_group());
  }

  // Delivers `value` under `key` to device `dst` (not this one): a device of this process gets a
  // copy in its memory through its mailbox; another process gets a send that is started here and
  // completes by the end of the list. `tag` is the message's tag between processes.
  void post(const Action& a, const MessageKey& key, int dst, int tag, Tensor value) {
    if (!t_.local(dst)) {
      backend_.synchronize();
      pending_sends_.push_back(send_tensor(pipeline_group(), dst, tag, std::move(value)));
      return;
    }
    if (!t_.mailboxes_[static_cast<size_t>(dst)]->put(key, backend_.copy_to(*t_.devices_[static_cast<size_t>(dst)], value),
                                                       deadline()))
      fail_wait(a, fmt::format("space in the mailbox of device {} (stage {})", dst, key.stage));
  }

  // Takes what post() delivered under `key` from device `src`; `what` names it in a timeout.
  Tensor take(const Action& a, const MessageKey& key, int src, int tag, const std::string& what) {
    if (!t_.local(src))
      return recv_tensor(pipeline_group(), backend_, src, tag, fmt::format("action {} of device {} ({})", a.str(), device_, what));
    Tensor t = t_.mailboxes_[static_cast<size_t>(device_)]->take(key, deadline());
    if (!t.defined()) fail_wait(a, what);
    return t;
  }

  // Sends `value` to stage `to` on another device.
  void send(const Action& a, int to, Direction dir, const Tensor& value) {
    post(a, {to, a.microbatch, dir}, stage(to).device, tag(dir, to, a.microbatch), value);
  }

  Tensor receive(const Action& a, Direction dir, int from) {
    return take(a, {a.stage, a.microbatch, dir}, stage(from).device, tag(dir, a.stage, a.microbatch),
                fmt::format("{} of micro-batch {} from stage {} on device {}",
                            dir == Direction::forward ? "the activation" : "the gradient", a.microbatch, from,
                            stage(from).device));
  }

  // ---- skip connections: straight from the saving stage to the adding one, and back --------------
  // Both directions push: the producer's F hands the activation to the consumer stage (its state
  // on this device, its device's mailbox, or its process), the consumer's backward hands the
  // gradient back the same way. Neither waits on a send, and the consumer's F (the producer's
  // backward) runs after the producer's F (the consumer's backward) in any valid schedule, so
  // these transfers add no cycle to the schedule's dependencies.
  void push_skip(const Action& a, size_t edge, int to_stage, Direction dir, Tensor value) {
    const SkipEdge& e = t_.model_->skip_edges()[edge];
    const int m = a.microbatch, dst = stage(to_stage).device;
    if (dst == device_) {
      auto& board = dir == Direction::forward ? state(to_stage, m).skips.activations : state(to_stage, m).skips.gradients;
      board[e.name] = std::move(value);
    } else {
      post(a, {to_stage, m, dir, 1 + static_cast<int>(edge)}, dst, skip_tag(dir, to_stage, m, edge), std::move(value));
    }
  }

  // Takes what push_skip sent to stage `s` from another device.
  Tensor pull_skip(const Action& a, size_t edge, int from_stage, Direction dir) {
    const SkipEdge& e = t_.model_->skip_edges()[edge];
    return take(a, {a.stage, a.microbatch, dir, 1 + static_cast<int>(edge)}, stage(from_stage).device,
                skip_tag(dir, a.stage, a.microbatch, edge),
                fmt::format("the {} of skip '{}' from stage {}", dir == Direction::forward ? "activation" : "gradient",
                            e.name, from_stage));
  }

  int skip_tag(Direction dir, int receiving_stage, int microbatch, size_t edge) const {
    if (!t_.config_.parallel.pipeline_group) return 0;
    const int edges = static_cast<int>(t_.model_->skip_edges().size());
    return transfer_tag(dir == Direction::forward ? TransferKind::skip_activation : TransferKind::skip_gradient,
                        receiving_stage, microbatch * edges + static_cast<int>(edge), t_.num_stages(), pipeline_group());
  }

  // Before F of s: the skip activations s adds that were saved on another device.
  void receive_skip_activations(const Action& a, State& st) {
    for (size_t k : t_.skips_in_[static_cast<size_t>(a.stage)]) {
      const int from = t_.stage_index_of_layer(t_.model_->skip_edges()[k].producer);
      if (stage(from).device != device_) st.skips.activations[t_.model_->skip_edges()[k].name] = pull_skip(a, k, from, Direction::forward);
    }
  }
  // After F of s: the skip activations s saved for later stages.
  void send_skip_activations(const Action& a, State& st) {
    for (size_t k : t_.skips_out_[static_cast<size_t>(a.stage)]) {
      const SkipEdge& e = t_.model_->skip_edges()[k];
      const auto it = st.skips.activations.find(e.name);
      if (it == st.skips.activations.end()) throw std::logic_error(fmt::format("{}: skip '{}' was not saved", a.str(), e.name));
      Tensor value = std::move(it->second);
      st.skips.activations.erase(it);
      push_skip(a, k, t_.stage_index_of_layer(e.consumer), Direction::forward, std::move(value));
    }
  }
  // Before the backward of s: the gradients of the skips s saved, from the stages that added them.
  void receive_skip_gradients(const Action& a, State& st) {
    for (size_t k : t_.skips_out_[static_cast<size_t>(a.stage)]) {
      const int from = t_.stage_index_of_layer(t_.model_->skip_edges()[k].consumer);
      if (stage(from).device != device_) st.skips.gradients[t_.model_->skip_edges()[k].name] = pull_skip(a, k, from, Direction::backward);
    }
  }
  // After the backward of s: the gradients of the skips s added, back to the stages that saved them.
  void send_skip_gradients(const Action& a, State& st) {
    for (size_t k : t_.skips_in_[static_cast<size_t>(a.stage)]) {
      const SkipEdge& e = t_.model_->skip_edges()[k];
      const auto it = st.skips.gradients.find(e.name);
      if (it == st.skips.gradients.end()) throw std::logic_error(fmt::format("{}: no gradient for skip '{}'", a.str(), e.name));
      Tensor value = std::move(it->second);
      st.skips.gradients.erase(it);
      push_skip(a, k, t_.stage_index_of_layer(e.producer), Direction::backward, std::move(value));
    }
  }

  // Forward through layers [a, b) of stage s with the contexts of `st`.
  Tensor forward_layers(State& st, int s, int a, int b, Tensor x) {
    Model& model = *t_.model_;
    const int first = stage(s).first_layer;
    for (int l = a; l < b; ++l) x = model.layer(l).forward(x, st.ctx[static_cast<size_t>(l - first)]);
    return x;
  }

  void forward(const Action& a) {
    const int s = a.stage, m = a.microbatch;
    State& st = state(s, m);
    const Stage& sg = stage(s);
    Tensor x;
    if (s == 0) {
      x = upload_rows(backend_, data_.inputs, data_.mb_first[static_cast<size_t>(m)], data_.mb_size[static_cast<size_t>(m)]);
    } else {
      if (!st.input.defined())
        throw std::logic_error(fmt::format("{}: no input activation (missing RECV_F?)", a.str()));
      x = std::move(st.input);
    }
    receive_skip_activations(a, st);
    const auto segments = stage_segments(t_.config_.recompute, sg.first_layer, sg.last_layer, is_last(s));
    st.segment_inputs.assign(segments.size(), Tensor());
    for (size_t k = 0; k < segments.size(); ++k) {
      const Segment& seg = segments[k];
      if (seg.recompute) st.segment_inputs[k] = x;
      x = forward_layers(st, s, seg.first_layer, seg.last_layer, x);
      if (seg.recompute)
        for (int l = seg.first_layer; l < seg.last_layer; ++l) st.ctx[static_cast<size_t>(l - sg.first_layer)].clear();
    }
    send_skip_activations(a, st);
    if (is_last(s)) {
      Model& model = *t_.model_;
      LayerContext& loss_ctx = st.ctx.back();
      const Tensor target = upload_rows(backend_, data_.targets, data_.mb_first[static_cast<size_t>(m)],
                                        data_.mb_size[static_cast<size_t>(m)]);
      data_.loss[static_cast<size_t>(device_)] += model.loss().forward(x, target, data_.global_batch, loss_ctx);
      const int64_t c = model.loss().count_correct(x, target, backend_);
      int64_t& total = data_.correct[static_cast<size_t>(device_)];
      total = c < 0 ? -1 : total + c;
      st.grad_output = model.loss().backward(loss_ctx);
      loss_ctx.clear();
    } else if (stage(s + 1).device == device_) {
      state(s + 1, m).input = std::move(x);  // local hand-off, no copy
    } else {
      st.output = std::move(x);
    }
  }

  // Input gradient through stage s; with `with_weights` (a B action) each layer's weight
  // gradient follows its input gradient at once, as in single-device training.
  void backward(const Action& a, bool with_weights) {
    const int s = a.stage, m = a.microbatch;
    State& st = state(s, m);
    const Stage& sg = stage(s);
    Model& model = *t_.model_;
    if (!st.grad_output.defined())
      throw std::logic_error(fmt::format("{}: no output gradient (missing F or RECV_B?)", a.str()));
    Tensor dy = std::move(st.grad_output);
    receive_skip_gradients(a, st);
    const bool final_wgrad = with_weights && is_final_weight_gradient(s);
    const auto segments = stage_segments(t_.config_.recompute, sg.first_layer, sg.last_layer, is_last(s));
    for (size_t k = segments.size(); k-- > 0;) {
      const Segment& seg = segments[k];
      if (seg.recompute) forward_layers(st, s, seg.first_layer, seg.last_layer, st.segment_inputs[k]);
      if (seg.recompute) st.segment_inputs[k] = Tensor();
      for (int l = seg.last_layer - 1; l >= seg.first_layer; --l) {
        LayerContext& c = st.ctx[static_cast<size_t>(l - sg.first_layer)];
        Layer& layer = model.layer(l);
        Tensor dx = l > 0 ? layer.backward_input(dy, c) : Tensor();  // nobody needs dL/d(input)
        if (with_weights) {
          layer.backward_weight(dy, c);
          c.clear();
          if (final_wgrad && reducer_) reducer_->layer_done(s, l);
        } else {
          st.dy[static_cast<size_t>(l - sg.first_layer)] = std::move(dy);
        }
        dy = std::move(dx);
      }
    }
    send_skip_gradients(a, st);
    if (s > 0) {
      if (stage(s - 1).device == device_) state(s - 1, m).grad_output = std::move(dy);
      else st.grad_input = std::move(dy);
    }
    st.weights_pending = !with_weights;
    st.backward_done = with_weights;
  }

  void weights(const Action& a) {
    const int s = a.stage, m = a.microbatch;
    State& st = state(s, m);
    if (!st.weights_pending) throw std::logic_error(fmt::format("{}: W without a preceding I", a.str()));
    const Stage& sg = stage(s);
    const bool final_wgrad = is_final_weight_gradient(s);
    for (int l = sg.last_layer - 1; l >= sg.first_layer; --l) {
      LayerContext& c = st.ctx[static_cast<size_t>(l - sg.first_layer)];
      t_.model_->layer(l).backward_weight(st.dy[static_cast<size_t>(l - sg.first_layer)], c);
      c.clear();
      if (final_wgrad && reducer_) reducer_->layer_done(s, l);
      st.dy[static_cast<size_t>(l - sg.first_layer)] = Tensor();
    }
    st.weights_pending = false;
    st.backward_done = true;
  }

  // True for the stage's last weight-gradient action (B or W) of the step: the gradients of the
  // layers it finishes are final, and their buckets may be all-reduced.
  bool is_final_weight_gradient(int s) {
    return ++weight_gradient_actions_[s] == t_.config_.trainer.microbatches;
  }

  // Frees a (stage, micro-batch) as soon as nothing of it is needed any more.
  void maybe_release(int s, int m) {
    auto it = states_.find({s, m});
    if (it == states_.end()) return;
    const State& st = *it->second;
    if (st.backward_done && !st.grad_input.defined()) release(s, m);
  }

  void execute(const Action& a) {
    switch (a.type) {
      case ActionType::F:
        forward(a);
        break;
      case ActionType::B:
        backward(a, true);
        break;
      case ActionType::I:
        backward(a, false);
        break;
      case ActionType::W:
        weights(a);
        break;
      case ActionType::SEND_F: {
        State& st = state(a.stage, a.microbatch);
        if (!st.output.defined()) throw std::logic_error(fmt::format("{}: nothing to send (F not run?)", a.str()));
        send(a, a.stage + 1, Direction::forward, st.output);
        st.output = Tensor();
        break;
      }
      case ActionType::RECV_F:
        state(a.stage, a.microbatch).input = receive(a, Direction::forward, a.stage - 1);
        break;
      case ActionType::SEND_B: {
        State& st = state(a.stage, a.microbatch);
        if (!st.grad_input.defined())
          throw std::logic_error(fmt::format("{}: nothing to send (B/I not run?)", a.str()));
        send(a, a.stage - 1, Direction::backward, st.grad_input);
        st.grad_input = Tensor();
        break;
      }
      case ActionType::RECV_B:
        state(a.stage, a.microbatch).grad_output = receive(a, Direction::backward, a.stage + 1);
        break;
      case ActionType::REDUCE_GRAD:
        if (reducer_) reducer_->flush(a.stage);
        return;
      case ActionType::STEP:
        return;  // the optimizer step runs after the lists (see train_step)
    }
    if (sched::has_microbatch(a.type)) maybe_release(a.stage, a.microbatch);
  }

  PipelineTrainer& t_;
  StepData& data_;
  int device_;
  Backend& backend_;
  GradientReducer* reducer_;  // null without data parallelism
  std::map<std::pair<int, int>, std::unique_ptr<State>> states_;
  std::map<int, int> weight_gradient_actions_;  // per stage: B/W actions run so far this step
  std::vector<std::unique_ptr<PendingSend>> pending_sends_;
};

}  // namespace pt

namespace pt {

// ---- the trainer ---------------------------------------------------------------------------------

PipelineTrainer::PipelineTrainer(Model& model, std::vector<Backend*> devices, const PipelineConfig& config)
    : model_(&model), config_(config), devices_(std::move(devices)) {
  const sched::Schedule& sc = config_.schedule;
  const ParallelContext& par = config_.parallel;
  if (static_cast<int>(devices_.size()) != sc.num_devices)
    throw UsageError(fmt::format("the schedule has {} devices but {} were given", sc.num_devices, devices_.size()));
  if (static_cast<int>(config_.layers_per_stage.size()) != sc.num_stages)
    throw UsageError(fmt::format("the partition has {} stages but the schedule has {}",
                                 config_.layers_per_stage.size(), sc.num_stages));
  const int total = std::accumulate(config_.layers_per_stage.begin(), config_.layers_per_stage.end(), 0);
  if (total != model.num_layers())
    throw UsageError(fmt::format("the stages cover {} layers but the model has {}", total, model.num_layers()));
  if (config_.schedule.microbatches != config_.trainer.microbatches)
    throw UsageError(fmt::format("the schedule is for {} micro-batches but --microbatches is {}",
                                 config_.schedule.microbatches, config_.trainer.microbatches));
  if (!(config_.timeout_s > 0)) throw UsageError(fmt::format("--timeout {} must be > 0 seconds", config_.timeout_s));
  if (par.replicas < 1 || par.replica < 0 || par.replica >= par.replicas)
    throw UsageError(fmt::format("replica {} of {} does not exist", par.replica, par.replicas));
  for (int d = 0; d < sc.num_devices; ++d) {
    if (!local(d)) continue;
    local_devices_.push_back(d);
    if (par.replicas > 1 && !par.data_parallel_group(d))
      throw UsageError(fmt::format("replica {} of {} has no data-parallel group for device {}", par.replica,
                                   par.replicas, d));
  }
  if (local_devices_.empty()) throw UsageError("none of the schedule's devices is held by this process");
  if (static_cast<int>(local_devices_.size()) != sc.num_devices) {
    if (!par.pipeline_group)
      throw UsageError("some schedule devices are in other processes (nullptr) but no pipeline communicator was given");
    if (par.pipeline_group->size() != sc.num_devices)
      throw UsageError(fmt::format("the pipeline communicator has {} ranks but the schedule has {} devices",
                                   par.pipeline_group->size(), sc.num_devices));
  }
  int first = 0;
  for (int s = 0; s < sc.num_stages; ++s) {
    const int n = config_.layers_per_stage[static_cast<size_t>(s)];
    if (n < 1) throw UsageError(fmt::format("stage {} has {} layers; every stage needs at least one", s, n));
    Stage st{first, first + n, sc.device_of(s), nullptr, nullptr};
    if (local(st.device)) {
      Backend& b = *devices_[static_cast<size_t>(st.device)];
      st.params = std::make_unique<StageParameters>(model, st.first_layer, st.last_layer, b, config_.trainer.seed);
      st.optimizer = std::make_unique<Optimizer>(config_.trainer.optimizer, b, st.params->layout());
    }
    stages_.push_back(std::move(st));
    first += n;
  }
  skips_in_.resize(stages_.size());
  skips_out_.resize(stages_.size());
  for (size_t k = 0; k < model.skip_edges().size(); ++k) {
    const int from = stage_index_of_layer(model.skip_edges()[k].producer), to = stage_index_of_layer(model.skip_edges()[k].consumer);
    if (from == to) continue;  // within one stage: the micro-batch's board is enough
    skips_out_[static_cast<size_t>(from)].push_back(k);
    skips_in_[static_cast<size_t>(to)].push_back(k);
  }
  std::vector<Backend*> held;
  for (int d : local_devices_) held.push_back(devices_[static_cast<size_t>(d)]);
  workers_ = std::make_unique<DeviceWorkers>(held);
  reducers_.resize(devices_.size());
  for (int d = 0; d < sc.num_devices; ++d) {
    // Room for every message a device can receive in one step: a valid schedule never blocks
    // a sender, while the bound still catches a runaway one.
    const size_t capacity =
        2 * static_cast<size_t>(sc.num_stages + static_cast<int>(model.skip_edges().size())) * static_cast<size_t>(sc.microbatches) + 2;
    mailboxes_.push_back(std::make_unique<Mailbox>(capacity, &workers_->abort_flag()));
    Communicator* group = par.replicas > 1 && local(d) ? par.data_parallel_group(d) : nullptr;
    if (!group) continue;
    std::vector<std::pair<int, StageParameters*>> held_stages;
    for (int s = 0; s < sc.num_stages; ++s)
      if (stages_[static_cast<size_t>(s)].device == d) held_stages.emplace_back(s, stages_[static_cast<size_t>(s)].params.get());
    reducers_[static_cast<size_t>(d)] = std::make_unique<GradientReducer>(*group, held_stages, par.bucket_bytes);
  }
}

PipelineTrainer::~PipelineTrainer() = default;

int PipelineTrainer::stage_index_of_layer(int layer) const {
  for (size_t s = 0; s < stages_.size(); ++s)
    if (layer >= stages_[s].first_layer && layer < stages_[s].last_layer) return static_cast<int>(s);
  throw std::out_of_range(fmt::format("layer {} is in no stage", layer));
}

const PipelineTrainer::Stage& PipelineTrainer::stage_of_layer(int layer) const {
  return stages_[static_cast<size_t>(stage_index_of_layer(layer))];
}

bool PipelineTrainer::holds_last_stage() const { return local(stages_.back().device); }

std::vector<ReductionStats> PipelineTrainer::last_reduction_stats() const {
  std::vector<ReductionStats> out;
  for (const auto& r : reducers_)
    if (r) out.push_back(r->last_stats());
  return out;
}

std::vector<StageState> PipelineTrainer::stage_states() {
  std::vector<StageState> out;
  for (Stage& s : stages_)
    if (s.params) out.push_back({s.params.get(), s.optimizer.get()});
  return out;
}

std::string PipelineTrainer::grid(const StepData& data) const {
  std::string out = "where each device was (the action in [brackets] is the one it was executing):\n";
  for (int d = 0; d < config_.schedule.num_devices; ++d) {
    if (!local(d)) {
      out += fmt::format("  device {}: in another process (world rank {})\n", d,
                         config_.parallel.pipeline_group->world_rank(d));
      continue;
    }
    const auto& actions = config_.schedule.actions[static_cast<size_t>(d)];
    const int pos = data.position[static_cast<size_t>(d)].load();
    out += fmt::format("  device {} ({}):", d, devices_[static_cast<size_t>(d)]->device().str());
    for (int i = 0; i < static_cast<int>(actions.size()); ++i)
      out += fmt::format(fmt::runtime(i == pos ? " [{}]" : " {}"), actions[static_cast<size_t>(i)].str());
    if (pos >= static_cast<int>(actions.size())) out += "  (finished)";
    out += "\n";
  }
  return out;
}

StepStats PipelineTrainer::train_step(const Tensor& inputs, const Tensor& targets) {
  const int64_t batch = inputs.shape()[0];
  if (targets.shape()[0] != batch)
    throw UsageError(fmt::format("a batch has {} inputs but {} targets", batch, targets.shape()[0]));
  const ParallelContext& par = config_.parallel;
  const int M = config_.trainer.microbatches;
  const int64_t parts = static_cast<int64_t>(par.replicas) * M;
  if (batch < parts)
    throw UsageError(fmt::format("a batch of {} samples cannot feed {} replica(s) x {} micro-batches: every "
                                 "micro-batch needs at least one sample; raise --batch to >= {}",
                                 batch, par.replicas, M, parts));
  StepData data(devices_.size());
  data.inputs = inputs;
  data.targets = targets;
  data.global_batch = batch;
  // The batch is cut into R*M micro-batches; replica r trains on micro-batches r*M .. r*M+M-1,
  // the same ones single-device accumulation over R*M micro-batches would see.
  const std::vector<int64_t> all_sizes = split_sizes(batch, parts);
  std::vector<int64_t> all_first(all_sizes.size());
  std::exclusive_scan(all_sizes.begin(), all_sizes.end(), all_first.begin(), int64_t{0});
  const auto mine = static_cast<ptrdiff_t>(par.replica) * M;
  data.mb_size.assign(all_sizes.begin() + mine, all_sizes.begin() + mine + M);
  data.mb_first.assign(all_first.begin() + mine, all_first.begin() + mine + M);
  data.info_base = StepInfo{config_.trainer.seed, step_, 0, true};
  data.start = Clock::now();

  for (Stage& s : stages_)
    if (s.params) s.params->zero_grads();
  for (int d : local_devices_) devices_[static_cast<size_t>(d)]->reset_peak();
  for (auto& r : reducers_)
    if (r) r->start_step();
  trace_.assign(devices_.size(), {});
  for (auto& mb : mailboxes_) mb->clear();

  auto wake_all = [this] {
    for (auto& mb : mailboxes_) mb->notify_all();
  };
  workers_->run_on_all(
      [&](int i) {
        const int d = local_devices_[static_cast<size_t>(i)];
        DeviceExecutor exec(*this, data, d);
        exec.run(config_.schedule.actions[static_cast<size_t>(d)],
                 config_.record_trace ? &trace_[static_cast<size_t>(d)] : nullptr);
        if (auto& reducer = reducers_[static_cast<size_t>(d)]) reducer->finish();
        devices_[static_cast<size_t>(d)]->synchronize();
      },
      wake_all);

  StepStats stats;
  stats.samples = batch;
  // The loss is computed on the device of the last stage; add the devices' shares in order.
  for (size_t d = 0; d < devices_.size(); ++d) stats.loss += data.loss[d];
  const int last_device = stages_.back().device;
  stats.correct = data.correct[static_cast<size_t>(last_device)];
  peak_bytes_.assign(devices_.size(), 0);
  for (int d : local_devices_) peak_bytes_[static_cast<size_t>(d)] = devices_[static_cast<size_t>(d)]->memory_stats().peak_bytes;

  std::vector<StageParameters*> held;
  for (const Stage& s : stages_)
    if (s.params) held.push_back(s.params.get());
  sum_tied_gradients(*model_, held, par.pipeline_group, [this](int layer) { return stage_of_layer(layer).device; });
  const std::vector<const StageParameters*> params(held.begin(), held.end());
  stats.grad_norm = global_grad_norm(params, *model_, par.pipeline_group);
  stats.lr = config_.trainer.lr.at(step_);
  if (!std::isfinite(stats.grad_norm)) {
    stats.skipped = true;  // every replica and stage sees the same norm, so all skip together
  } else {
    const float factor = clip_factor(stats.grad_norm, config_.trainer.clip_norm);
    workers_->run_on_all([&](int i) {
      const int d = local_devices_[static_cast<size_t>(i)];
      for (Stage& s : stages_) {
        if (s.device != d) continue;
        Tensor g = s.params->grads_flat();
        if (factor != 1.f && g.numel()) s.params->backend().scale(factor, g.f32(), g.numel());
        s.optimizer->step(s.params->params_flat(), g, stats.lr);
      }
      devices_[static_cast<size_t>(d)]->synchronize();
    });
  }
  ++step_;
  return stats;
}

EvalStats PipelineTrainer::evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk) {
  const int64_t n = inputs.shape()[0];
  const EvalShare share = evaluate_rows(inputs, targets, 0, n, n, chunk);
  EvalStats out;
  out.samples = n;
  out.loss = share.loss;
  out.accuracy = share.correct < 0 ? -1.0 : static_cast<double>(share.correct) / static_cast<double>(n);
  return out;
}

PipelineTrainer::EvalShare PipelineTrainer::evaluate_rows(const Tensor& inputs, const Tensor& targets,
                                                          int64_t first_row, int64_t row_count, int64_t divisor,
                                                          int64_t chunk) {
  EvalShare out;
  const StepInfo info{config_.trainer.seed, step_, 0, false};
  Communicator* group = config_.parallel.pipeline_group;
  const int S = num_stages();
  int index = 0;
  for (int64_t first = first_row; first < first_row + row_count; first += chunk, ++index) {
    const int64_t count = std::min(chunk, first_row + row_count - first);
    Tensor x;
    SkipBoard skips;  // the stages held here share it; skips from other processes are received into it
    const int edges = static_cast<int>(model_->skip_edges().size());
    const auto skip_tag = [&](int receiving_stage, size_t edge) {
      return transfer_tag(TransferKind::skip_activation, receiving_stage, index * edges + static_cast<int>(edge), S, *group);
    };
    for (int k = 0; k < S; ++k) {
      const Stage& s = stages_[static_cast<size_t>(k)];
      const bool here = local(s.device);
      if (k == 0) {
        if (here) x = upload_rows(*devices_[static_cast<size_t>(s.device)], inputs, first, count);
      } else if (const int prev = stages_[static_cast<size_t>(k - 1)].device; prev != s.device) {
        const std::string what = fmt::format("evaluation chunk {} from stage {} to stage {}", index, k - 1, k);
        if (local(prev) && here) {  // move the activation to this device
          x = devices_[static_cast<size_t>(prev)]->copy_to(*devices_[static_cast<size_t>(s.device)], x);
        } else if (local(prev)) {
          devices_[static_cast<size_t>(prev)]->synchronize();
          send_tensor(*group, s.device, transfer_tag(TransferKind::evaluation, k, index, S, *group), x)->wait(what);
          x = Tensor();
        } else if (here) {
          x = recv_tensor(*group, *devices_[static_cast<size_t>(s.device)], prev,
                          transfer_tag(TransferKind::evaluation, k, index, S, *group), what);
        }
      }
      if (!here) continue;
      Backend& b = *devices_[static_cast<size_t>(s.device)];
      for (size_t e : skips_in_[static_cast<size_t>(k)])
        if (const int from = stage_index_of_layer(model_->skip_edges()[e].producer); !local(stages_[static_cast<size_t>(from)].device))
          skips.activations[model_->skip_edges()[e].name] =
              recv_tensor(*group, b, stages_[static_cast<size_t>(from)].device, skip_tag(k, e),
                          fmt::format("evaluation chunk {}: skip '{}' from stage {}", index, model_->skip_edges()[e].name, from));
      b.bind_current_thread();
      for (int l = s.first_layer; l < s.last_layer; ++l) {
        LayerContext ctx(b, info, static_cast<uint64_t>(l));
        ctx.set_skips(&skips);
        x = model_->layer(l).forward(x, ctx);
      }
      for (size_t e : skips_out_[static_cast<size_t>(k)])
        if (const int to = stage_index_of_layer(model_->skip_edges()[e].consumer); !local(stages_[static_cast<size_t>(to)].device)) {
          b.synchronize();
          send_tensor(*group, stages_[static_cast<size_t>(to)].device, skip_tag(to, e), skips.activations.at(model_->skip_edges()[e].name))
              ->wait(fmt::format("evaluation chunk {}: skip '{}' to stage {}", index, model_->skip_edges()[e].name, to));
        }
    }
    if (!holds_last_stage()) continue;
    Backend& last = *devices_[static_cast<size_t>(stages_.back().device)];
    const Tensor target = upload_rows(last, targets, first, count);
    LayerContext loss_ctx(last, info, static_cast<uint64_t>(model_->num_layers()));
    out.loss += model_->loss().forward(x, target, divisor, loss_ctx);
    const int64_t c = model_->loss().count_correct(x, target, last);
    out.correct = c < 0 || out.correct < 0 ? -1 : out.correct + c;
  }
  return out;
}

}  // namespace pt
