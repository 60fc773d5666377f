#pragma once
// Gradient buckets (as DDP forms them): contiguous ranges of a stage's flat gradient arena, each
// covering whole layers, formed from the stage's last layer backwards (the order backward
// finishes them) and at least `bucket_bytes` big (the last may be smaller). A bucket's
// all-reduce can start once the final micro-batch's weight gradient of its first layer is done.
// Buckets tile the arena, padding included (it is zero and stays zero).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/train/stage_parameters.h"

namespace pt {

struct GradientBucket {
  int stage = 0;
  std::vector<int> layers;  // global indices of the layers with parameters it covers (descending)
  int64_t offset = 0;       // f32 elements from the start of the stage's flat gradient arena
  int64_t count = 0;        // f32 elements
};

std::vector<GradientBucket> plan_gradient_buckets(const StageParameters& params, int stage,
                                                  size_t bucket_bytes);

}  // namespace pt
