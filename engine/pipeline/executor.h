#pragma once
// The interpreter of one device's action list: the one `switch` over action types, and the state
// each (stage, micro-batch) holds between its actions. It runs whatever list the schedule gives,
// training (F, B, I, W, SEND/RECV, REDUCE_GRAD) or forward only (evaluation), and never decides an
// order itself.
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/parallel/gradient_reducer.h"
#include "engine/parallel/parameter_residency.h"
#include "engine/pipeline/layout.h"
#include "engine/pipeline/recompute.h"
#include "engine/pipeline/skip_routing.h"
#include "engine/pipeline/transport.h"
#include "engine/trace/flight_recorder.h"
#include "engine/train/forward_pass.h"
#include "engine/train/stage_parameters.h"
#include "schedule/timed_action.h"

namespace pt {

// One executed action, for traces and measured bubbles (times from the run's start).
using ExecutedAction = sched::TimedAction;

// One run of a schedule (a training step, or an evaluation pass): what all devices' executors
// share. Each executor writes only its own device's entries.
struct ScheduleRun {
  using Clock = std::chrono::steady_clock;

  Tensor inputs, targets;                  // host (B, ...)
  int64_t loss_divisor = 1;                // the loss shares are sums over samples / this
  std::vector<int64_t> mb_first, mb_size;  // rows of each micro-batch
  StepInfo info;  // info.microbatch: the global index of micro-batch 0 here (replica r: r*M)
  std::vector<double> loss;                // per device: its loss shares, added in list order
  std::vector<int64_t> correct;            // per device (-1: not a classification loss)
  std::vector<std::atomic<int>> position;  // per device: index of the action being executed
  Clock::time_point start = Clock::now();

  // An asynchronous window (--update async) runs several steps: micro-batch m belongs to step
  // mb_step[m] of the run (empty: every micro-batch to the one step), whose rows mb_first/mb_size
  // index step_inputs/step_targets[step] and whose loss is divided by step_divisor[step]. Loss
  // and correct count are then kept per step too: step_loss[device][step].
  std::vector<int> mb_step;
  int step_microbatches = 0;  // micro-batches per step (the dropout key's index within its step)
  std::vector<Tensor> step_inputs, step_targets;
  std::vector<int64_t> step_divisor;
  std::vector<std::vector<double>> step_loss;
  std::vector<std::vector<int64_t>> step_correct;
  // Called on the device's thread before every F/B/I/W (binds the weight version of the action's
  // step) and for every UPDATE; null when the run has no such needs.
  std::function<void(const sched::Action& a, int step)> before_compute;
  std::function<void(int stage, int step)> update;

  explicit ScheduleRun(size_t devices)
      : loss(devices, 0.0), correct(devices, 0), position(devices) {}
};

// What does not change between runs.
struct ExecutorSetup {
  Model* model = nullptr;
  // Per stage, the parameters held here (null elsewhere): a layer's first weight gradient of
  // the step writes its gradients (StageParameters::take_unwritten).
  std::vector<StageParameters*> parameters;
  const PipelineLayout* layout = nullptr;
  RecomputePolicy recompute;
  Transport* transport = nullptr;
  double timeout_s = 60;
  // Adjacent forwards of two micro-batches take turns at their tensor-parallel collectives
  // (Executor::forwards_to_pair says where): --tp-overlap on with --tp > 1.
  bool forwards_take_turns = false;
  // Every device's list with its current action marked, for error messages.
  std::function<std::string(const ScheduleRun&)> progress;
  // How the flight recorder names this run's list and its devices (device d: base + d).
  FlightList flight_list = FlightList::training;
  int flight_device_base = 0;
};

class Executor {
 public:
  // `reducer`: the device's data-parallel gradient reduction (null without, and in evaluation).
  // `residency`: where the device's parameters are gathered and dropped (null: always whole).
  Executor(const ExecutorSetup& setup, ScheduleRun& run, int device, Backend& backend,
           GradientReducer* reducer, ParameterResidency* residency = nullptr);
  ~Executor();

  // Runs `actions` in order; appends each action's times to `trace` when given: the device's
  // times, from timing events read once the list is done (Backend::record_timing_event).
  void run(const std::vector<sched::Action>& actions, std::vector<ExecutedAction>* trace);

 private:
  struct State;
  using Clock = ScheduleRun::Clock;

  // What a last stage's forward adds to the run's loss and correct count (of its step, in an
  // asynchronous window).
  struct LossShare {
    Loss::Counted counted;
    size_t step = 0;
  };

  using Perform = std::function<void(size_t, const std::function<void()>&)>;
  size_t forwards_to_pair(const std::vector<sched::Action>& actions, size_t i);
  void run_paired_forwards(const std::vector<sched::Action>& actions, size_t i, size_t n,
                           const Perform& perform);
  void execute(const sched::Action& a);
  std::optional<LossShare> forward(const sched::Action& a);
  void add_loss(const std::optional<LossShare>& share);
  void backward(const sched::Action& a, bool with_weights);
  void weights(const sched::Action& a);
  int step_of(int m) const;
  bool is_final_weight_gradient(int s);
  void maybe_release(int s, int m);
  State& state(int s, int m);
  StageParameters& parameters(int s) const;

  // Transfers to and from the device of another stage, failing with the grid on a timeout.
  void send(const sched::Action& a, int to_stage, const MessageKey& key, Tensor value);
  Tensor receive(const sched::Action& a, int from_stage, const MessageKey& key,
                 const std::string& what);
  SkipIo skip_io(const sched::Action& a);
  [[noreturn]] void fail_wait(const sched::Action& a, const std::string& what,
                              const std::string& reason = {});
  Clock::time_point deadline() const;

  const StageRange& stage(int s) const { return setup_.layout->stage(s); }
  bool here(int s) const { return stage(s).device == device_; }

  const ExecutorSetup& setup_;
  ScheduleRun& run_;
  int device_;
  Backend& backend_;
  GradientReducer* reducer_;
  ParameterResidency* residency_;
  bool training_;
  std::map<std::pair<int, int>, std::unique_ptr<State>> states_;
  std::map<int, int> weight_gradient_actions_;  // per stage: B/W actions run so far
};

}  // namespace pt
