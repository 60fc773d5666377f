#pragma once
// What recomputation (recompute.h) costs and saves, per stage, in the partitioner's terms
// (stage_cost.h): the planner compares recompute policies with these, and the plan's simulated
// step time includes the extra forward. The same segments the executor runs (stage_segments).
//   memory  params + grads + optimizer state (as stage_memory_bytes)
//           + inflight x held per micro-batch, where a recomputed segment holds only its input
//             (the previous layer's output bytes; the stage's own input for its first layer) and
//             a kept segment all its layers' saved activations
//           + the largest recomputed segment's activations once (rebuilt for one backward)
//   time    the recomputed segments' forward again, before their backward (I or B), without a
//           full-sharding gather (LayerProfile::forward_gather_s: the backward's is the same one)
#include <cstdint>
#include <vector>

#include "engine/partition/layer_costs.h"
#include "engine/pipeline/recompute.h"

namespace pt {

int64_t stage_memory_bytes(const std::vector<LayerProfile>& layers, int first, int last,
                           int inflight, int optimizer_slots, const RecomputePolicy& policy,
                           bool last_stage);

// The activation part of the above alone (what full sharding, full_shard.h, leaves unsharded).
int64_t stage_activation_peak_bytes(const std::vector<LayerProfile>& layers, int first, int last,
                                    int inflight, const RecomputePolicy& policy, bool last_stage);

// Seconds of forward recomputed per micro-batch by stage [first, last).
double recompute_time_s(const std::vector<LayerProfile>& layers, int first, int last,
                        const RecomputePolicy& policy, bool last_stage);

}  // namespace pt
