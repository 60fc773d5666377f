#pragma once
// The layer costs of one of T tensor-parallel ranks (the T devices that together hold one
// pipeline stage, Megatron-style: attention heads and the MLP's columns split T ways), and what
// those ranks all-reduce among themselves. The cost source knows which layers shard and how
// (gpt_costs.h); the planner knows the link and turns the bytes into seconds (engine/plan/
// tensor_parallel.h), so the same table serves any cluster.
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/partition/layer_costs.h"

namespace pt {

struct ShardedCosts {
  // One rank's share, per micro-batch: compute and memory already divided by T where the layer
  // is sharded; output_bytes is what this rank sends across a stage boundary.
  std::vector<LayerProfile> layers;
  // Per layer and micro-batch: bytes each all-reduce among the T ranks carries, and how many
  // such all-reduces the layer's forward (F) and its backward_input (I) wait for. A recomputed
  // forward repeats F's (recompute_cost.h adds forward_s again).
  std::vector<int64_t> allreduce_bytes;
  std::vector<int> forward_allreduces, backward_allreduces;
};

// Costs that do not shard (a cost file, a profiled table): T = 1, no all-reduces.
inline ShardedCosts unsharded(std::vector<LayerProfile> layers) {
  ShardedCosts out;
  const size_t n = layers.size();
  out.layers = std::move(layers);
  out.allreduce_bytes.assign(n, 0);
  out.forward_allreduces.assign(n, 0);
  out.backward_allreduces.assign(n, 0);
  return out;
}

}  // namespace pt
