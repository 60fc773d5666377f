#include "engine/pipeline/executor.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/comm/take_turns.h"
#include "engine/core/error.h"
#include "engine/train/trainer.h"

namespace pt {

using sched::Action;
using sched::ActionType;

// What one (stage, micro-batch) holds between its actions on this device.
struct Executor::State {
  std::unique_ptr<MicrobatchContexts> ctx;  // per layer of the stage (+ the loss on the last)
  std::vector<Tensor> segment_inputs;       // input of each recomputed segment
  std::vector<Tensor> dy;                   // per layer: the gradient its W needs
  Tensor input, output, grad_output, grad_input;
  bool forward_done = false;
  bool weights_pending = false;  // I done, W not yet
  bool backward_done = false;    // B, or I and W, done
};

Executor::Executor(const ExecutorSetup& setup, ScheduleRun& run, int device, Backend& backend,
                   GradientReducer* reducer, ParameterResidency* residency)
    : setup_(setup),
      run_(run),
      device_(device),
      backend_(backend),
      reducer_(reducer),
      residency_(residency),
      training_(run.info.training) {}

Executor::~Executor() = default;

void Executor::run(const std::vector<Action>& actions, std::vector<ExecutedAction>* trace) {
  std::atomic<int>& position = run_.position[static_cast<size_t>(device_)];
  FlightRecorder& recorder = flight_recorder();
  // A trace marks each action's start and end in the device's queue with timing events and reads
  // them once the list is done: on a GPU a synchronisation per action would serialise the
  // streams (and the measured bubble with them). `anchor` ties device time to the run's clock.
  std::unique_ptr<TimingEvent> anchor;
  std::vector<std::unique_ptr<TimingEvent>> marks;  // start and end of action i: 2i, 2i + 1
  Clock::time_point anchor_at;
  if (trace) {
    anchor = backend_.record_timing_event();
    anchor_at = Clock::now();
    marks.resize(2 * actions.size());
  }
  // Action i as one flight-recorder event between its two marks; `work` runs it.
  const auto perform = [&](size_t i, const std::function<void()>& work) {
    FlightEvent event;
    event.kind = FlightKind::action;
    event.list = setup_.flight_list;
    event.device = setup_.flight_device_base + device_;
    event.op = static_cast<uint8_t>(actions[i].type);
    event.stage = actions[i].stage;
    event.microbatch = actions[i].microbatch;
    event.index = static_cast<int>(i);
    if (trace) marks[2 * i] = backend_.record_timing_event();
    recorder.record(event, work);
    if (trace) marks[2 * i + 1] = backend_.record_timing_event();
  };
  for (size_t i = 0; i < actions.size();) {
    position = static_cast<int>(i);
    if (const size_t n = forwards_to_pair(actions, i)) {
      run_paired_forwards(actions, i, n, perform);
      i += n;
      continue;
    }
    perform(i, [&] { execute(actions[i]); });
    ++i;
  }
  position = static_cast<int>(actions.size());
  if (residency_) residency_->finish_run();
  setup_.transport->flush(
      device_, fmt::format("the completion of device {}'s sends to other processes", device_));
  if (trace) {
    // Microseconds from the run's start (ExecutedAction's time base).
    const double at = std::chrono::duration<double, std::micro>(anchor_at - run_.start).count();
    const auto micros = [&](size_t k) { return at + 1e6 * marks[k]->seconds_since(*anchor); };
    // Paired forwards ran at once: each action is given the time after the one before it in the
    // list, so that the device's busy time is its wall time, not the pair's counted twice.
    double last_end = 0;
    for (size_t i = 0; i < actions.size(); ++i) {
      const double start = std::max(micros(2 * i), last_end);
      last_end = std::max(micros(2 * i + 1), start);
      trace->push_back({actions[i], start, last_end});
    }
  }
  if (!states_.empty())
    throw std::logic_error(
        fmt::format("device {} finished its actions with {} micro-batch states still held: the "
                    "schedule is missing a {}",
                    device_, states_.size(), training_ ? "backward" : "send"));
}

// ---- paired forwards ---------------------------------------------------------------------------

// Where the list has two forwards of different micro-batches one after the other (with at most
// the first's SEND_F between them) and the second's input is here already (the data, or a
// local hand-off from an earlier action), the two may take turns (engine/comm/take_turns.h):
// while one waits for a tensor-parallel collective the other computes, so the forward's
// collectives, which nothing of their own micro-batch can hide, hide behind the other's work.
// The list's order is kept: the first starts first and its send follows it; only the compute of
// the two interleaves, at the collectives, alike on every rank. Returns how many actions the
// pair spans (2 or 3), or 0 where the forwards run one by one: not asked for, a device whose
// memory the collective thread cannot read, gathered parameters (full sharding), a weight version
// bound per action (asynchronous windows), or skip connections (a skip received in the second
// forward could wait for a device that waits for this one).
size_t Executor::forwards_to_pair(const std::vector<Action>& actions, size_t i) {
  if (!setup_.forwards_take_turns || residency_ || run_.before_compute ||
      !backend_.host_accessible() || !setup_.model->skip_edges().empty())
    return 0;
  const Action& first = actions[i];
  if (first.type != ActionType::F) return 0;
  size_t j = i + 1;
  if (j < actions.size() && actions[j].type == ActionType::SEND_F &&
      actions[j].stage == first.stage && actions[j].microbatch == first.microbatch)
    ++j;
  if (j >= actions.size()) return 0;
  const Action& second = actions[j];
  if (second.type != ActionType::F || second.microbatch == first.microbatch) return 0;
  if (second.stage != 0) {  // its input must have been handed over already
    const auto it = states_.find({second.stage, second.microbatch});
    if (it == states_.end() || !it->second->input.defined()) return 0;
  }
  return j - i + 1;
}

void Executor::run_paired_forwards(const std::vector<Action>& actions, size_t i, size_t n,
                                   const Perform& perform) {
  const size_t j = i + n - 1;
  // The two share this executor's state without locks: only one of them runs at a time.
  std::optional<LossShare> shares[2];
  TakeTurns::run(
      [&] {
        perform(i, [&] { shares[0] = forward(actions[i]); });
        if (n == 3) perform(i + 1, [&] { execute(actions[i + 1]); });
      },
      [&] {
        backend_.bind_current_thread();
        perform(j, [&] { shares[1] = forward(actions[j]); });
      });
  add_loss(shares[0]);
  add_loss(shares[1]);
  maybe_release(actions[i].stage, actions[i].microbatch);
  maybe_release(actions[j].stage, actions[j].microbatch);
}

// ---- state -------------------------------------------------------------------------------------

StageParameters& Executor::parameters(int s) const {
  const auto i = static_cast<size_t>(s);
  if (i >= setup_.parameters.size() || !setup_.parameters[i])
    throw std::logic_error(
        fmt::format("stage {}: a weight gradient on a device without the stage's parameters", s));
  return *setup_.parameters[i];
}

Executor::State& Executor::state(int s, int m) {
  auto& p = states_[{s, m}];
  if (!p) {
    p = std::make_unique<State>();
    StepInfo info = run_.info;
    info.microbatch = run_.info.microbatch + m;  // the global index: run_.info holds the first
    if (const int k = step_of(m); k > 0) {       // a later step of an asynchronous window
      info.step += k;
      info.microbatch -= k * run_.step_microbatches;
    }
    p->ctx = std::make_unique<MicrobatchContexts>(backend_, info, stage(s).first_layer,
                                                  stage(s).last_layer, setup_.layout->is_last(s));
    p->dy.resize(static_cast<size_t>(stage(s).last_layer - stage(s).first_layer));
  }
  return *p;
}

int Executor::step_of(int m) const {
  return run_.mb_step.empty() ? 0 : run_.mb_step[static_cast<size_t>(m)];
}

// Frees a (stage, micro-batch) as soon as nothing of it is needed any more: in training after its
// backward (and its input gradient left), in evaluation after its output left.
void Executor::maybe_release(int s, int m) {
  const auto it = states_.find({s, m});
  if (it == states_.end()) return;
  const State& st = *it->second;
  const bool done = training_ ? st.backward_done && !st.grad_input.defined()
                              : st.forward_done && !st.output.defined();
  if (done) states_.erase(it);
}

// ---- transfers ---------------------------------------------------------------------------------

ScheduleRun::Clock::time_point Executor::deadline() const {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(setup_.timeout_s));
}

void Executor::fail_wait(const Action& a, const std::string& what, const std::string& reason) {
  throw TimeoutError(fmt::format(
      "device {} ({}) waited {} s in action {} for {}{}: the peer is stalled, dead or the schedule "
      "does not match; "
      "raise --timeout if the peer is only slow\n{}",
      device_, backend_.device().str(), setup_.timeout_s, a.str(), what,
      reason.empty() ? "" : " (" + reason + ")", setup_.progress ? setup_.progress(run_) : ""));
}

void Executor::send(const Action& a, int to_stage, const MessageKey& key, Tensor value) {
  const int to = stage(to_stage).device;
  if (!setup_.transport->send(device_, to, key, std::move(value), deadline()))
    fail_wait(a, fmt::format("room for a message to device {} (stage {})", to, to_stage));
}

Tensor Executor::receive(const Action& a, int from_stage, const MessageKey& key,
                         const std::string& what) {
  Tensor t;
  try {
    t = setup_.transport->receive(stage(from_stage).device, device_, key, deadline());
  } catch (const TimeoutError& e) {
    fail_wait(a, what, e.what());
  }
  if (!t.defined()) fail_wait(a, what);
  return t;
}

SkipIo Executor::skip_io(const Action& a) {
  SkipIo io;
  io.microbatch = a.microbatch;
  io.is_here = [this](int s) { return here(s); };
  io.board_here = [this, m = a.microbatch](int s) -> SkipBoard& {
    return state(s, m).ctx->skips();
  };
  io.send = [this, a](int to, const MessageKey& key, Tensor value) {
    send(a, to, key, std::move(value));
  };
  io.receive = [this, a](int from, const MessageKey& key, const std::string& what) {
    return receive(a, from, key, what);
  };
  return io;
}

// ---- compute -----------------------------------------------------------------------------------

std::optional<Executor::LossShare> Executor::forward(const Action& a) {
  const int s = a.stage, m = a.microbatch;
  Model& model = *setup_.model;
  State& st = state(s, m);
  const StageRange& sg = stage(s);
  const auto rows = [&](const Tensor& host) {
    return upload_rows(backend_, host, run_.mb_first[static_cast<size_t>(m)],
                       run_.mb_size[static_cast<size_t>(m)]);
  };
  const bool window = !run_.mb_step.empty();
  const auto k = static_cast<size_t>(step_of(m));
  Tensor x;
  if (s == 0) {
    x = rows(window ? run_.step_inputs[k] : run_.inputs);
  } else {
    if (!st.input.defined())
      throw std::logic_error(fmt::format("{}: no input activation (missing RECV_F?)", a.str()));
    x = std::move(st.input);
  }
  const SkipIo io = skip_io(a);
  receive_skips(Direction::forward, s, st.ctx->skips(), model, *setup_.layout, io);
  const auto segments =
      stage_segments(setup_.recompute, sg.first_layer, sg.last_layer, setup_.layout->is_last(s));
  st.segment_inputs.assign(segments.size(), Tensor());
  AfterLayer after;
  BeforeLayer before;
  if (residency_) {
    before = [&](int l) {
      residency_->before_compute(s, l, ParameterResidency::Pass::forward, false);
    };
    after = [&](int l, const Tensor&, const Tensor&, LayerContext&) {
      residency_->after_forward(s, l);
    };
  }
  for (size_t k = 0; k < segments.size(); ++k) {
    const Segment& seg = segments[k];
    const bool recompute = seg.recompute && training_;
    if (recompute) st.segment_inputs[k] = x;
    x = forward_layers(model, seg.first_layer, seg.last_layer, x, *st.ctx, after, before);
    if (recompute)
      for (int l = seg.first_layer; l < seg.last_layer; ++l) st.ctx->layer(l).clear();
  }
  send_skips(Direction::forward, s, st.ctx->skips(), model, *setup_.layout, io);
  st.forward_done = true;
  std::optional<LossShare> share;
  if (setup_.layout->is_last(s)) {
    const Tensor target = rows(window ? run_.step_targets[k] : run_.targets);
    const Loss::Counted counted = model.loss().forward_counting(
        x, target, window ? run_.step_divisor[k] : run_.loss_divisor, st.ctx->loss());
    share = LossShare{counted, k};
    if (training_) st.grad_output = model.loss().backward(st.ctx->loss());
    st.ctx->loss().clear();
  } else if (here(s + 1)) {
    state(s + 1, m).input = std::move(x);  // local hand-off, no copy
  } else {
    st.output = std::move(x);
  }
  return share;
}

// In list order, so that the sums do not depend on how paired forwards interleaved.
void Executor::add_loss(const std::optional<LossShare>& share) {
  if (!share) return;
  const auto dev = static_cast<size_t>(device_);
  const auto add = [&](double& loss, int64_t& correct) {
    loss += share->counted.loss;
    correct = share->counted.correct < 0 ? -1 : correct + share->counted.correct;
  };
  add(run_.loss[dev], run_.correct[dev]);
  if (!run_.mb_step.empty())
    add(run_.step_loss[dev][share->step], run_.step_correct[dev][share->step]);
}

// Input gradient through stage s; with `with_weights` (a B action) each layer's weight gradient
// follows its input gradient at once, as in single-device training.
void Executor::backward(const Action& a, bool with_weights) {
  const int s = a.stage, m = a.microbatch;
  Model& model = *setup_.model;
  State& st = state(s, m);
  const StageRange& sg = stage(s);
  if (!st.grad_output.defined())
    throw std::logic_error(fmt::format("{}: no output gradient (missing F or RECV_B?)", a.str()));
  Tensor dy = std::move(st.grad_output);
  const SkipIo io = skip_io(a);
  receive_skips(Direction::backward, s, st.ctx->skips(), model, *setup_.layout, io);
  const bool final_wgrad = with_weights && is_final_weight_gradient(s);
  const auto segments =
      stage_segments(setup_.recompute, sg.first_layer, sg.last_layer, setup_.layout->is_last(s));
  BeforeLayer recompute_before;
  if (residency_)
    recompute_before = [&](int l) {
      residency_->before_compute(s, l, ParameterResidency::Pass::recompute, false);
    };
  for (size_t k = segments.size(); k-- > 0;) {
    const Segment& seg = segments[k];
    if (seg.recompute) {
      forward_layers(model, seg.first_layer, seg.last_layer, st.segment_inputs[k], *st.ctx, {},
                     recompute_before);
      st.segment_inputs[k] = Tensor();
    }
    for (int l = seg.last_layer - 1; l >= seg.first_layer; --l) {
      LayerContext& c = st.ctx->layer(l);
      Layer& layer = model.layer(l);
      if (residency_)
        residency_->before_compute(s, l, ParameterResidency::Pass::backward, with_weights);
      // Nobody needs dL/d(input) of a layer with no parameters before it, unless a stage before
      // this one waits for the gradient.
      const bool wants_dx = s > 0 || model.needs_input_gradient(l);
      Tensor dx;
      if (with_weights) {
        // Both at once, so that the layer may overlap them (Layer::backward).
        const bool unwritten = parameters(s).take_unwritten(l);
        if (wants_dx)
          dx = run_backward(layer, dy, c, unwritten);
        else
          run_backward_weight(layer, dy, c, unwritten);
        c.clear();
        if (final_wgrad) layer.complete_gradients(backend_);
        if (final_wgrad && reducer_) reducer_->layer_done(s, l);
      } else {
        if (wants_dx) dx = layer.backward_input(dy, c);
        st.dy[static_cast<size_t>(l - sg.first_layer)] = std::move(dy);
      }
      if (residency_) residency_->after_backward(s, l, with_weights, final_wgrad);
      dy = std::move(dx);
    }
  }
  send_skips(Direction::backward, s, st.ctx->skips(), model, *setup_.layout, io);
  if (s > 0) {
    if (here(s - 1))
      state(s - 1, m).grad_output = std::move(dy);
    else
      st.grad_input = std::move(dy);
  }
  st.weights_pending = !with_weights;
  st.backward_done = with_weights;
}

void Executor::weights(const Action& a) {
  const int s = a.stage;
  State& st = state(s, a.microbatch);
  if (!st.weights_pending)
    throw std::logic_error(fmt::format("{}: W without a preceding I", a.str()));
  const StageRange& sg = stage(s);
  const bool final_wgrad = is_final_weight_gradient(s);
  for (int l = sg.last_layer - 1; l >= sg.first_layer; --l) {
    LayerContext& c = st.ctx->layer(l);
    Tensor& dy = st.dy[static_cast<size_t>(l - sg.first_layer)];
    if (residency_) residency_->before_compute(s, l, ParameterResidency::Pass::backward, true);
    run_backward_weight(setup_.model->layer(l), dy, c, parameters(s).take_unwritten(l));
    c.clear();
    if (final_wgrad) setup_.model->layer(l).complete_gradients(backend_);
    if (final_wgrad && reducer_) reducer_->layer_done(s, l);
    if (residency_) residency_->after_backward(s, l, true, final_wgrad);
    dy = Tensor();
  }
  st.weights_pending = false;
  st.backward_done = true;
}

// True for the stage's last weight-gradient action (B or W) of the step: the gradients of the
// layers it finishes are final, and their buckets may be all-reduced.
bool Executor::is_final_weight_gradient(int s) {
  return ++weight_gradient_actions_[s] == static_cast<int>(run_.mb_size.size());
}

// ---- the one switch ----------------------------------------------------------------------------

void Executor::execute(const Action& a) {
  if (sched::is_compute(a.type) && run_.before_compute)
    run_.before_compute(a, step_of(a.microbatch));
  switch (a.type) {
    case ActionType::F: add_loss(forward(a)); break;
    case ActionType::B: backward(a, true); break;
    case ActionType::I: backward(a, false); break;
    case ActionType::W: weights(a); break;
    case ActionType::SEND_F: {
      State& st = state(a.stage, a.microbatch);
      if (!st.output.defined())
        throw std::logic_error(fmt::format("{}: nothing to send (F not run?)", a.str()));
      send(a, a.stage + 1, {a.stage + 1, a.microbatch, Direction::forward}, std::move(st.output));
      st.output = Tensor();
      break;
    }
    case ActionType::RECV_F:
      state(a.stage, a.microbatch).input =
          receive(a, a.stage - 1, {a.stage, a.microbatch, Direction::forward},
                  fmt::format("the activation of micro-batch {} from stage {} on device {}",
                              a.microbatch, a.stage - 1, stage(a.stage - 1).device));
      break;
    case ActionType::SEND_B: {
      State& st = state(a.stage, a.microbatch);
      if (!st.grad_input.defined())
        throw std::logic_error(fmt::format("{}: nothing to send (B/I not run?)", a.str()));
      send(a, a.stage - 1, {a.stage - 1, a.microbatch, Direction::backward},
           std::move(st.grad_input));
      st.grad_input = Tensor();
      break;
    }
    case ActionType::RECV_B:
      state(a.stage, a.microbatch).grad_output =
          receive(a, a.stage + 1, {a.stage, a.microbatch, Direction::backward},
                  fmt::format("the gradient of micro-batch {} from stage {} on device {}",
                              a.microbatch, a.stage + 1, stage(a.stage + 1).device));
      break;
    case ActionType::REDUCE_GRAD:
      if (reducer_) reducer_->flush(a.stage);
      return;
    case ActionType::UPDATE:
      if (!run_.update)
        throw std::logic_error(
            fmt::format("{}: UPDATE in a run without asynchronous updates", a.str()));
      run_.update(a.stage, a.microbatch);
      return;
  }
  if (sched::has_microbatch(a.type)) maybe_release(a.stage, a.microbatch);
}

}  // namespace pt
