#pragma once
// The sharded optimizer (--shard-optimizer, ZeRO-1) as the update of a synchronous step: no
// reduction during backward; at the step's end each stage's StageShard reduce-scatters the
// gradients, the global norm is taken from the owners' sums of squares (the same bits as the
// unsharded epilogue's), each replica clips and steps its 1/R of the tensors, and the parameters
// are all-gathered (engine/parallel/optimizer_shards.h has the maths and the collectives).
// A full-layout optimizer exists only while a checkpoint needs it.
#include <memory>
#include <vector>

#include "engine/parallel/optimizer_shards.h"
#include "engine/update/update_strategy.h"

namespace pt {

class ShardedUpdate final : public UpdateStrategy {
 public:
  explicit ShardedUpdate(const UpdateContext& context);

  // A checkpoint's full optimizer goes back into the shards (a loaded one must; a saved one
  // holds the shards' own values) and is dropped: it would be stale after this step.
  void begin_step(int64_t /*step*/) override { take_full_optimizers(); }
  EpilogueResult end_step(int64_t step, const EpilogueConfig& epilogue) override;
  Optimizer* optimizer(int stage) override { return full_.at(static_cast<size_t>(stage)).get(); }
  void make_full_optimizers() override { make_missing_optimizers(context_, full_); }
  void gather_full_optimizers() override;
  void take_full_optimizers() override;
  size_t optimizer_state_bytes() const override;

 private:
  UpdateContext context_;
  std::vector<std::unique_ptr<StageShard>> shards_;  // per stage held here
  std::vector<std::unique_ptr<Optimizer>> full_;     // per stage: only while a checkpoint needs it
};

}  // namespace pt
