#pragma once
// Tensor parallelism (T) in the planner: which degrees a cluster allows, and one rank's layer
// costs with its all-reduces priced on the link within a node.
//
// Placement: D = T x S x R with T innermost, so the T ranks of a stage are neighbouring devices
// of one node (T divides devices_per_node) and the pipeline and data-parallel axes see a node as
// devices_per_node / T "devices" of T ranks each (cluster.h's placements, applied to those).
//
// Time: a layer's all-reduces among its T ranks are added to its F (forward) and I (backward
// input) on the critical path, not overlapped (Megatron 2021 waits for them), each a ring:
//   2 (T - 1) / T x bytes / allreduce_bytes_per_second + 2 (T - 1) x allreduce_latency_s
// the bus bandwidth of an all-reduce within a node (the cluster file's allreduce_gb_per_s).
#include <cstdint>
#include <vector>

#include "engine/partition/layer_costs.h"
#include "engine/partition/sharded_costs.h"
#include "engine/plan/cluster.h"

namespace pt {

// Seconds of one ring all-reduce of `bytes` among T ranks over `link` (0 for T = 1).
double ring_allreduce_s(double bytes, int T, const Link& link);

// One rank's costs with each layer's all-reduces added to its forward_s and backward_input_s.
std::vector<LayerProfile> with_tensor_parallel_traffic(const ShardedCosts& costs, int T,
                                                       const Link& link);

// Every T >= 1 that divides `devices`, `devices_per_node` (0: one node, no constraint) and
// `heads` (0: T = 1 only: nothing says how the layers shard), ascending, at most `most`.
std::vector<int> tensor_parallel_degrees(int devices, int devices_per_node, int heads, int most);

// Throws UsageError naming the rule and the valid degrees when T does not divide the devices,
// the devices per node or the heads (heads 0: T must be 1), or T < 1.
void check_tensor_parallel(int T, int devices, int devices_per_node, int heads);

}  // namespace pt
