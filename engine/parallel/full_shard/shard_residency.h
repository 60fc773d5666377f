#pragma once
// The executor's hooks for full sharding on one device (engine/parallel/parameter_residency.h):
// a unit is gathered before its first layer computes, dropped after its forward (unless
// reshard_after_forward is off, then at the step's end) and after its backward, and its
// gradients are reduce-scattered when the stage's last weight gradient of the step has passed
// the unit's first layer. No prefetch: each gather runs on the device's worker when the unit is
// needed (a prefetch of the next unit, overlapped with compute, is not built yet).
#include <map>

#include "engine/parallel/full_shard/unit_shards.h"
#include "engine/parallel/parameter_residency.h"

namespace pt {

class FullShardResidency final : public ParameterResidency {
 public:
  // The stages this device holds, by stage index.
  explicit FullShardResidency(std::map<int, UnitShards*> stages) : stages_(std::move(stages)) {}

  void before_compute(int stage, int layer, bool weight_gradient) override;
  void after_forward(int stage, int layer) override;
  void after_backward(int stage, int layer, bool weight_gradient, bool final) override;

 private:
  UnitShards& shards(int stage) const;

  std::map<int, UnitShards*> stages_;
};

}  // namespace pt
