#include "engine/pipeline/layout.h"

#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

PipelineLayout PipelineLayout::make(const Model& model, const std::vector<int>& layers_per_stage,
                                    const std::vector<int>& stage_device) {
  if (layers_per_stage.size() != stage_device.size())
    throw UsageError(fmt::format("the partition has {} stages but the schedule has {}",
                                 layers_per_stage.size(), stage_device.size()));
  const int total = std::accumulate(layers_per_stage.begin(), layers_per_stage.end(), 0);
  if (total != model.num_layers())
    throw UsageError(
        fmt::format("the stages cover {} layers but the model has {}", total, model.num_layers()));
  PipelineLayout out;
  int first = 0;
  for (size_t s = 0; s < layers_per_stage.size(); ++s) {
    const int n = layers_per_stage[s];
    if (n < 1)
      throw UsageError(fmt::format("stage {} has {} layers; every stage needs at least one", s, n));
    out.stages.push_back({first, first + n, stage_device[s]});
    first += n;
  }
  out.skips_in.resize(out.stages.size());
  out.skips_out.resize(out.stages.size());
  for (size_t k = 0; k < model.skip_edges().size(); ++k) {
    const int from = out.stage_of_layer(model.skip_edges()[k].producer);
    const int to = out.stage_of_layer(model.skip_edges()[k].consumer);
    if (from == to) continue;
    out.skips_out[static_cast<size_t>(from)].push_back(k);
    out.skips_in[static_cast<size_t>(to)].push_back(k);
  }
  return out;
}

int PipelineLayout::stage_of_layer(int layer) const {
  for (size_t s = 0; s < stages.size(); ++s)
    if (layer >= stages[s].first_layer && layer < stages[s].last_layer) return static_cast<int>(s);
  throw std::out_of_range(fmt::format("layer {} is in no stage", layer));
}

}  // namespace pt
