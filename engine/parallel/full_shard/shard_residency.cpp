#include "engine/parallel/full_shard/shard_residency.h"

#include <stdexcept>

#include <fmt/format.h>

namespace pt {

UnitShards& FullShardResidency::shards(int stage) const {
  const auto it = stages_.find(stage);
  if (it == stages_.end())
    throw std::logic_error(
        fmt::format("full sharding: stage {} is not held on this device", stage));
  return *it->second;
}

void FullShardResidency::before_compute(int stage, int layer, bool weight_gradient) {
  UnitShards& sh = shards(stage);
  const size_t u = sh.params().unit_of_layer(layer);
  sh.gather(u);
  if (weight_gradient) sh.make_gradients(u);
}

void FullShardResidency::after_forward(int stage, int layer) {
  UnitShards& sh = shards(stage);
  const size_t u = sh.params().unit_of_layer(layer);
  if (sh.config().reshard_after_forward && layer + 1 == sh.params().unit(u).last_layer)
    sh.release(u);
}

void FullShardResidency::after_backward(int stage, int layer, bool /*weight_gradient*/,
                                        bool final) {
  UnitShards& sh = shards(stage);
  const size_t u = sh.params().unit_of_layer(layer);
  if (layer != sh.params().unit(u).first_layer) return;  // the unit's backward goes on
  if (final) sh.reduce(u);
  if (sh.config().reshard_after_forward) sh.release(u);
}

}  // namespace pt
