#pragma once
// Where a pipeline's layers are: stage s holds layers [first_layer, last_layer) on schedule device
// `device`, and the skip connections (Model::skip_edges) whose two ends sit in different stages.
// Plain data, built once from the partition and the schedule's placement.
#include <cstddef>
#include <vector>

#include "layers/model.h"

namespace pt {

struct StageRange {
  int first_layer = 0, last_layer = 0;  // [first, last)
  int device = 0;                       // schedule device
};

struct PipelineLayout {
  std::vector<StageRange> stages;
  // Per stage: the skip edges (indices into Model::skip_edges) it adds from an earlier stage
  // (skips_in) and those it saves for a later stage (skips_out). Edges within a stage are in
  // neither: the micro-batch's own board carries them.
  std::vector<std::vector<size_t>> skips_in, skips_out;

  // Stage s has layers_per_stage[s] layers (each >= 1, summing to the model's) on device
  // stage_device[s]; throws UsageError naming the mismatch otherwise.
  static PipelineLayout make(const Model& model, const std::vector<int>& layers_per_stage,
                             const std::vector<int>& stage_device);

  int num_stages() const { return static_cast<int>(stages.size()); }
  const StageRange& stage(int s) const { return stages.at(static_cast<size_t>(s)); }
  bool is_last(int s) const { return s == num_stages() - 1; }
  int stage_of_layer(int layer) const;  // throws std::out_of_range for a layer in no stage
};

}  // namespace pt
