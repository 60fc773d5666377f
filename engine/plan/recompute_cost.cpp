#include "engine/plan/recompute_cost.h"

#include <algorithm>

#include "engine/partition/byte_count.h"
#include "engine/partition/stage_cost.h"

namespace pt {

namespace {

int64_t activations(const std::vector<LayerProfile>& layers, int first, int last) {
  int64_t b = 0;
  for (int l = first; l < last; ++l)
    b = add_bytes(b, layers[static_cast<size_t>(l)].activation_bytes);
  return b;
}

}  // namespace

int64_t stage_activation_peak_bytes(const std::vector<LayerProfile>& layers, int first, int last,
                                    int inflight, const RecomputePolicy& policy, bool last_stage) {
  int64_t held = 0, rebuilt = 0;
  for (const Segment& seg : stage_segments(policy, first, last, last_stage)) {
    if (!seg.recompute) {
      held = add_bytes(held, activations(layers, seg.first_layer, seg.last_layer));
      continue;
    }
    // The model's input is the data batch, held by the caller whatever the policy.
    if (seg.first_layer > 0)
      held = add_bytes(held, layers[static_cast<size_t>(seg.first_layer - 1)].output_bytes);
    rebuilt = std::max(rebuilt, activations(layers, seg.first_layer, seg.last_layer));
  }
  // Saturating (byte_count.h): a cost file's maxima overflow int64_t.
  return add_bytes(times_bytes(inflight, held), rebuilt);
}

int64_t stage_memory_bytes(const std::vector<LayerProfile>& layers, int first, int last,
                           int inflight, int optimizer_slots, const RecomputePolicy& policy,
                           bool last_stage) {
  return add_bytes(stage_memory_bytes(layers, first, last, 0, optimizer_slots),
                   stage_activation_peak_bytes(layers, first, last, inflight, policy, last_stage));
}

double recompute_time_s(const std::vector<LayerProfile>& layers, int first, int last,
                        const RecomputePolicy& policy, bool last_stage) {
  double t = 0;
  for (const Segment& seg : stage_segments(policy, first, last, last_stage))
    if (seg.recompute)
      for (int l = seg.first_layer; l < seg.last_layer; ++l)
        t += layers[static_cast<size_t>(l)].forward_s -
             layers[static_cast<size_t>(l)].forward_gather_s;
  return t;
}

}  // namespace pt
