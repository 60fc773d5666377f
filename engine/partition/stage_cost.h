#pragma once
// What one stage costs: its time per micro-batch and its predicted peak memory. The formulas
// live here once, so the partitioner's search, its plans and the tests agree to the bit.
#include <cstdint>
#include <vector>

#include "engine/partition/layer_costs.h"

namespace pt {

// F + I + W per micro-batch of layers [first, last), summed layer by layer in order.
double stage_time_s(const std::vector<LayerProfile>& layers, int first, int last);

// Parameter bytes of layers [first, last).
int64_t stage_param_bytes(const std::vector<LayerProfile>& layers, int first, int last);

// Activation bytes layers [first, last) save per micro-batch (held from its F to its W or B).
int64_t stage_activation_bytes(const std::vector<LayerProfile>& layers, int first, int last);

// Peak memory of a stage holding layers [first, last):
//   params + grads + optimizer_slots x params            (all f32, all resident)
//   + activation bytes x inflight                         (saved tensors of the micro-batches
//                                                          whose forward ran but whose backward
//                                                          has not: GPipe M, 1F1B S - s)
// Every byte count here saturates at kBytesBeyond (byte_count.h) instead of overflowing.
int64_t stage_memory_bytes(const std::vector<LayerProfile>& layers, int first, int last,
                           int inflight, int optimizer_slots);

}  // namespace pt
