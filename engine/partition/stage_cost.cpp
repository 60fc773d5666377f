#include "engine/partition/stage_cost.h"

namespace pt {

double stage_time_s(const std::vector<LayerProfile>& layers, int first, int last) {
  double t = 0;
  for (int l = first; l < last; ++l) t += layers[static_cast<size_t>(l)].total_s();
  return t;
}

int64_t stage_param_bytes(const std::vector<LayerProfile>& layers, int first, int last) {
  int64_t b = 0;
  for (int l = first; l < last; ++l) b += layers[static_cast<size_t>(l)].param_bytes;
  return b;
}

int64_t stage_activation_bytes(const std::vector<LayerProfile>& layers, int first, int last) {
  int64_t b = 0;
  for (int l = first; l < last; ++l) b += layers[static_cast<size_t>(l)].activation_bytes;
  return b;
}

int64_t stage_memory_bytes(const std::vector<LayerProfile>& layers, int first, int last,
                           int inflight, int optimizer_slots) {
  return (2 + optimizer_slots) * stage_param_bytes(layers, first, last) +
         inflight * stage_activation_bytes(layers, first, last);
}

}  // namespace pt
