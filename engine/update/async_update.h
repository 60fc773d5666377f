#pragma once
// The asynchronous update (--update async, PipeDream-2BW): train_steps runs up to `window` steps
// as one schedule (schedule/one_f_one_b_async: 1F1B without a flush between the steps). Step t's
// micro-batches compute with W(t - delay) forward and backward (two versions per stage,
// weight_versions.h; delay 1, or less where the lists allow it: async_delay.h)
// and each stage applies its own UPDATE as soon as its gradient of a step is complete:
// W(t + 1) = W(t) - lr * update(g(W(t - delay))). No global norm, no clipping; tied parameters
// must sit on one stage; with --dp R each UPDATE first all-reduces the stage's gradient.
#include <map>
#include <memory>
#include <vector>

#include "engine/update/async_delay.h"
#include "engine/update/update_strategy.h"
#include "engine/update/weight_versions.h"

namespace pt {

class AsyncUpdate final : public UpdateStrategy {
 public:
  // Refuses what asynchronous updates cannot do (yet) before anything runs.
  AsyncUpdate(const UpdateContext& context, int window, AsyncDelay delay, int64_t step);

  EpilogueResult end_step(int64_t step, const EpilogueConfig& epilogue) override;
  int window() const override { return window_; }
  const sched::Schedule& window_schedule(int steps) override;
  int64_t before_compute(const sched::Action& action, int64_t step) override;
  double update(int stage, int64_t step) override;
  void end_window() override;

  Optimizer* optimizer(int stage) override {
    return optimizers_.at(static_cast<size_t>(stage)).get();
  }
  void set_step(int64_t step) override;
  size_t optimizer_state_bytes() const override { return held_optimizer_bytes(optimizers_); }
  size_t weight_stash_bytes() const override;
  // The oldest version a stage's micro-batches compute with (0: it keeps no second version).
  int stage_delay(int stage) const override;

 private:
  void check() const;
  // Per stage and micro-batch of a step, the delay `delay` binds, from what the window's lists
  // allow (two steps show the steady state; every window, however short, binds the same
  // versions, so the trajectory does not depend on where windows are cut).
  std::vector<std::vector<int>> microbatch_delays(AsyncDelay delay) const;

  UpdateContext context_;
  int window_;
  std::vector<std::vector<int>> delays_;                   // per stage, per micro-batch of a step
  std::vector<std::unique_ptr<Optimizer>> optimizers_;     // per stage held here
  std::vector<std::unique_ptr<WeightVersions>> versions_;  // per stage held here
  std::map<int, sched::Schedule> window_schedules_;        // lowered, per window length
};

}  // namespace pt
