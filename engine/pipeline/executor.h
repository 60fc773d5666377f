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
#include <string>
#include <vector>

#include "engine/forward_pass.h"
#include "engine/parallel/gradient_reducer.h"
#include "engine/pipeline/layout.h"
#include "engine/pipeline/recompute.h"
#include "engine/pipeline/skip_routing.h"
#include "engine/pipeline/transport.h"
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

  explicit ScheduleRun(size_t devices)
      : loss(devices, 0.0), correct(devices, 0), position(devices) {}
};

// What does not change between runs.
struct ExecutorSetup {
  Model* model = nullptr;
  const PipelineLayout* layout = nullptr;
  RecomputePolicy recompute;
  Transport* transport = nullptr;
  double timeout_s = 60;
  // Every device's list with its current action marked, for error messages.
  std::function<std::string(const ScheduleRun&)> progress;
};

class Executor {
 public:
  // `reducer`: the device's data-parallel gradient reduction (null without, and in evaluation).
  Executor(const ExecutorSetup& setup, ScheduleRun& run, int device, Backend& backend,
           GradientReducer* reducer);
  ~Executor();

  // Runs `actions` in order; appends each action's times to `trace` when given (the device is
  // synchronised after each action then, so the times are the device's).
  void run(const std::vector<sched::Action>& actions, std::vector<ExecutedAction>* trace);

 private:
  struct State;
  using Clock = ScheduleRun::Clock;

  void execute(const sched::Action& a);
  void forward(const sched::Action& a);
  void backward(const sched::Action& a, bool with_weights);
  void weights(const sched::Action& a);
  bool is_final_weight_gradient(int s);
  void maybe_release(int s, int m);
  State& state(int s, int m);

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
  bool training_;
  std::map<std::pair<int, int>, std::unique_ptr<State>> states_;
  std::map<int, int> weight_gradient_actions_;  // per stage: B/W actions run so far
};

}  // namespace pt
