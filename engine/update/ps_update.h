#pragma once
// A parameter-server worker's update (--ps K): the servers hold the parameters' master copy and
// the optimizer state and run the step epilogue's maths (engine/parallel/parameter_server.h); a
// step begins with each held stage pulling its parameters (replica 0 sends its own first) and
// ends with every held stage pushing its gradients before any pulls. A worker holds no optimizer
// state: a full-layout optimizer exists only to carry a loaded checkpoint's state to the servers
// (INIT) or the servers' state to a save (FETCH), and is dropped at the next pull.
#include <memory>
#include <vector>

#include "engine/update/update_strategy.h"

namespace pt {

class ParameterServerUpdate final : public UpdateStrategy {
 public:
  explicit ParameterServerUpdate(const UpdateContext& context);

  void begin_step(int64_t step) override;
  EpilogueResult end_step(int64_t step, const EpilogueConfig& epilogue) override;
  Optimizer* optimizer(int stage) override { return full_.at(static_cast<size_t>(stage)).get(); }
  void make_full_optimizers() override { make_missing_optimizers(context_, full_); }
  void gather_full_optimizers() override { make_full_optimizers(); }
  size_t optimizer_state_bytes() const override { return held_optimizer_bytes(full_); }

 private:
  UpdateContext context_;
  std::vector<std::unique_ptr<Optimizer>> full_;  // per stage: only while a checkpoint needs it
};

}  // namespace pt
