#include "engine/partition/stage_cost.h"

#include "engine/partition/byte_count.h"

namespace pt {

double stage_time_s(const std::vector<LayerProfile>& layers, int first, int last) {
  double t = 0;
  for (int l = first; l < last; ++l) t += layers[static_cast<size_t>(l)].total_s();
  return t;
}

int64_t stage_param_bytes(const std::vector<LayerProfile>& layers, int first, int last) {
  int64_t b = 0;
  for (int l = first; l < last; ++l) b = add_bytes(b, layers[static_cast<size_t>(l)].param_bytes);
  return b;
}

int64_t stage_activation_bytes(const std::vector<LayerProfile>& layers, int first, int last) {
  int64_t b = 0;
  for (int l = first; l < last; ++l)
    b = add_bytes(b, layers[static_cast<size_t>(l)].activation_bytes);
  return b;
}

int64_t stage_memory_bytes(const std::vector<LayerProfile>& layers, int first, int last,
                           int inflight, int optimizer_slots) {
  // Saturating (byte_count.h): a cost file's maxima overflow int64_t.
  return add_bytes(times_bytes(2 + optimizer_slots, stage_param_bytes(layers, first, last)),
                   times_bytes(inflight, stage_activation_bytes(layers, first, last)));
}

}  // namespace pt
