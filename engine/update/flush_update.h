#pragma once
// The synchronous update (--update sync, the default): a flush ends every step, then the step
// epilogue (engine/train/step_epilogue.h) sums tied gradients, takes the global norm, clips or
// skips and steps each stage's optimizer, exactly as the single-device Trainer does. With
// --dp R each device's gradients are all-reduced over its replicas in buckets that start while
// backward still runs (GradientReducer, handed to the executor).
#include <memory>
#include <vector>

#include "engine/update/update_strategy.h"

namespace pt {

class FlushUpdate final : public UpdateStrategy {
 public:
  explicit FlushUpdate(const UpdateContext& context);

  void begin_step(int64_t step) override;
  GradientReducer* reducer(int device) override;
  EpilogueResult end_step(int64_t step, const EpilogueConfig& epilogue) override;
  Optimizer* optimizer(int stage) override {
    return optimizers_.at(static_cast<size_t>(stage)).get();
  }
  size_t optimizer_state_bytes() const override { return held_optimizer_bytes(optimizers_); }

 private:
  UpdateContext context_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;      // per stage held here
  std::vector<std::unique_ptr<GradientReducer>> reducers_;  // per schedule device (R > 1)
};

}  // namespace pt
