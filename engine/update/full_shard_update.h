#pragma once
// Full sharding (--shard full; ZeRO-3, FSDP) as the update of a synchronous step: each held
// stage's parameters, gradients and optimizer state are split between the R replicas
// (engine/parallel/full_shard/unit_shards.h); the executor gathers and drops units around their
// compute and reduce-scatters their gradients once final (FullShardResidency, one per device);
// at the step's end the epilogue of engine/train/step_epilogue.cpp runs on the parts: tied
// gradients summed, the global norm from the parts' sums of squares, clip or skip, each replica
// steps its parts. Outside a step every sharded unit is dropped; a checkpoint gathers them
// (gather_full_optimizers) or fills them (make_full_optimizers, then take_full_optimizers).
// With --shard-group G the parts are cut across G replicas and replicated across R / G.
#include <memory>
#include <vector>

#include "engine/parallel/full_shard/shard_residency.h"
#include "engine/parallel/full_shard/unit_shards.h"
#include "engine/update/update_strategy.h"

namespace pt {

class FullShardUpdate final : public UpdateStrategy {
 public:
  FullShardUpdate(const UpdateContext& context, const FullShardConfig& shard);

  // A checkpoint's whole values go back into the parts and are dropped.
  void begin_step(int64_t step) override;
  ParameterResidency* residency(int device) override;
  EpilogueResult end_step(int64_t step, const EpilogueConfig& epilogue) override;
  Optimizer* optimizer(int stage) override { return full_.at(static_cast<size_t>(stage)).get(); }
  void make_full_optimizers() override;
  void gather_full_optimizers() override;
  void take_full_optimizers() override;
  void gather_whole_parameters() override;
  size_t optimizer_state_bytes() const override;
  HeldBytes held_bytes(const std::vector<StageParameters*>& stages) const override;
  std::vector<ReductionStats> last_shard_stats() const override;

 private:
  UpdateContext context_;
  std::vector<std::unique_ptr<UnitShards>> shards_;             // per stage held here
  std::vector<std::unique_ptr<FullShardResidency>> residency_;  // per schedule device
  std::vector<std::unique_ptr<Optimizer>> full_;  // per stage: only while a checkpoint needs it
};

}  // namespace pt
