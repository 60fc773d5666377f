#pragma once
// The partitioner: which contiguous layer range [first, last) each pipeline stage s runs.
//
//   method      chooses                                     optimum
//   uniform     layer counts that differ by <= 1 (earlier stages get the extra layer)
//   params      the split with the smallest largest stage parameter bytes     exact DP
//   time        the split with the smallest slowest stage time (F + I + W)     exact DP
//   memory      as `time`, among splits whose every stage fits mem_cap_bytes   exact DP
//   layout:a,b  exactly a, b, ... layers per stage
//
// The costs come from estimate_costs or profile_costs (layer_costs.h); the searches are one
// min-max dynamic programme (min_max_split.h); the per-stage formulas are in stage_cost.h.
// Ties go to the earliest cut, so the same inputs always give the same plan.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/partition/layer_costs.h"
#include "engine/partition/partition_method.h"
#include "layers/model.h"

namespace pt {

struct PartitionRequest {
  PartitionMethod method;  // uniform by default
  int stages = 1;          // S
  // Predicted peak bytes allowed per stage; 0 = no cap. `memory` searches for a split under
  // it; every other method is checked against it, so a plan never promises what won't fit.
  int64_t mem_cap_bytes = 0;
  // Micro-batches whose activations a stage holds at once under the schedule: GPipe M on
  // every stage, 1F1B S - s on stage s. Empty: 1 each.
  std::vector<int> inflight_per_stage;
  int optimizer_slots = 1;  // state tensors per parameter: SGD 0, SGD momentum 1, AdamW 2
};

struct StagePlan {
  int first_layer = 0, last_layer = 0;  // [first, last)
  int64_t params = 0;                   // parameter count (f32 elements)
  double time_s = 0;                    // F + I + W per micro-batch
  int64_t peak_memory_bytes = 0;        // see stage_memory_bytes
};

struct Partition {
  std::vector<StagePlan> stages;
  PartitionMethod method;

  double max_stage_time() const;
  // One row per stage: stage, layer range, params, predicted time (ms), peak memory (MiB).
  std::string table() const;
  std::vector<int> layout() const;  // layers per stage
};

// Throws UsageError (with the numbers and the fix) for: stages < 1, more stages than layers,
// a layout that does not fit the model and S, a bad inflight list, `memory` without a cap, and
// a cap that no split fits (naming the smallest cap that would).
Partition partition(const Model& model, const std::vector<LayerProfile>& costs,
                    const PartitionRequest& request);
// The same for a model known only by its cost table (one entry per layer): the planner's input.
Partition partition(const std::vector<LayerProfile>& costs, const PartitionRequest& request);

}  // namespace pt
