#pragma once
// A TrainingEngine that passes every call on to another: the base of the examples' wrappers that
// change one call (the test-only fault injection, --parity-check's lock-step reference).
#include <vector>

#include "engine/train/training_engine.h"

namespace pt::examples {

class ForwardingEngine : public TrainingEngine {
 public:
  explicit ForwardingEngine(TrainingEngine& inner) : inner_(&inner) {}

  StepStats train_step(const Tensor& inputs, const Tensor& targets) override {
    return inner_->train_step(inputs, targets);
  }
  EvalStats evaluate(const Tensor& inputs, const Tensor& targets, int64_t chunk) override {
    return inner_->evaluate(inputs, targets, chunk);
  }
  Model& model() const override { return inner_->model(); }
  uint64_t seed() const override { return inner_->seed(); }
  int64_t step() const override { return inner_->step(); }
  double recent_step_seconds() const override { return inner_->recent_step_seconds(); }
  void set_step(int64_t step) override { inner_->set_step(step); }
  std::vector<StageState> stage_states() override { return inner_->stage_states(); }
  std::vector<StageState> all_stage_copies() override { return inner_->all_stage_copies(); }
  void stage_copies_loaded() override { inner_->stage_copies_loaded(); }
  std::vector<StageState> stages_to_save() override { return inner_->stages_to_save(); }
  bool peer_asked_to_stop() const override { return inner_->peer_asked_to_stop(); }
  std::optional<int64_t> agree_on_stop(bool stopping) override {
    return inner_->agree_on_stop(stopping);
  }

 protected:
  TrainingEngine& inner() const { return *inner_; }

 private:
  TrainingEngine* inner_;
};

}  // namespace pt::examples
