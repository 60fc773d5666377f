#include "engine/parallel/gradient_buckets.h"

#include <map>

namespace pt {

std::vector<GradientBucket> plan_gradient_buckets(const StageParameters& params, int stage,
                                                  size_t bucket_bytes) {
  // Where each layer's parameters start in the arena (its entries are contiguous, in order).
  std::map<int, size_t> layer_start;
  for (const ParameterEntry& e : params.entries()) {
    const size_t offset = params.layout().entries()[e.table_index].offset;
    auto [it, inserted] = layer_start.try_emplace(e.layer, offset);
    if (!inserted && offset < it->second) it->second = offset;
  }
  std::vector<GradientBucket> buckets;
  GradientBucket open;
  size_t open_end = params.layout().total_bytes();
  for (auto it = layer_start.rbegin(); it != layer_start.rend(); ++it) {
    const auto& [layer, start] = *it;
    // The first layer's range begins at the arena's start, so the buckets tile the arena.
    const size_t begin = std::next(it) == layer_start.rend() ? 0 : start;
    open.layers.push_back(layer);
    if (open_end - begin >= bucket_bytes || std::next(it) == layer_start.rend()) {
      open.stage = stage;
      open.offset = static_cast<int64_t>(begin / sizeof(float));
      open.count = static_cast<int64_t>((open_end - begin) / sizeof(float));
      buckets.push_back(std::move(open));
      open = GradientBucket();
      open_end = begin;
    }
  }
  return buckets;
}

}  // namespace pt
