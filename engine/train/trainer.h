#pragma once
// Single-device training: gradient accumulation over M micro-batches. This is the reference
// semantics that every pipeline schedule reproduces: for each micro-batch m = 0..M-1 in order,
// forward through all layers, the loss share (sum over its samples / global batch), then for
// each layer from last to first backward_input and backward_weight (dW += ...). Then one global
// gradient-norm pass (clipping and the inf/NaN check), and one optimizer step.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/report/step_clock.h"
#include "engine/train/stage_parameters.h"
#include "engine/train/training_engine.h"

namespace pt {

struct TrainerConfig {
  int microbatches = 1;  // M
  uint64_t seed = 0;     // parameters and dropout derive from it
  OptimizerConfig optimizer;
  LrSchedule lr;
  float clip_norm = 0.f;  // 0 = no clipping
};

class Trainer final : public TrainingEngine {
 public:
  Trainer(Model& model, Backend& backend, const TrainerConfig& config);

  // One optimizer step on one global batch. inputs (B, ...model input) and targets
  // (B, ...loss target) are host tensors (Tensor::borrow). B >= M.
  StepStats train_step(const Tensor& inputs, const Tensor& targets) override;

  // Forward only, in evaluation mode, over host tensors in chunks of `chunk` samples.
  EvalStats evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk = 1000) override;

  Model& model() const override { return *model_; }
  uint64_t seed() const override { return config_.seed; }
  std::vector<StageState> stage_states() override { return {{params_.get(), optimizer_.get()}}; }
  Backend& backend() const { return *backend_; }
  StageParameters& parameters() { return *params_; }
  Optimizer& optimizer() { return *optimizer_; }
  const TrainerConfig& config() const { return config_; }
  // Optimizer steps taken so far (including skipped ones); the next step's index.
  int64_t step() const override { return step_; }
  double recent_step_seconds() const override { return step_clock_.median_seconds(); }
  void set_step(int64_t step) override { step_ = step; }

 private:
  Model* model_;
  Backend* backend_;
  TrainerConfig config_;
  std::unique_ptr<StageParameters> params_;
  std::unique_ptr<Optimizer> optimizer_;
  int64_t step_ = 0;
  StepClock step_clock_;
};

// Copies rows [first, first + count) of a host tensor into a new tensor on `backend`.
Tensor upload_rows(Backend& backend, const Tensor& host, int64_t first, int64_t count);

}  // namespace pt
