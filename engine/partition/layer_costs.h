#pragma once
// What the partitioner knows about each layer: time of its three calls and the bytes it holds,
// per micro-batch. Two sources with one result type, so the partitioner never cares which:
//   estimate_costs - from LayerCost (FLOPs, saved bytes) and two machine rates; no device needed;
//   profile_costs  - by running every layer on a real backend and timing each call.
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/core/backend.h"
#include "layers/model.h"

namespace pt {

struct LayerProfile {
  // Seconds per micro-batch for forward (F), backward_input (I) and backward_weight (W).
  double forward_s = 0, backward_input_s = 0, backward_weight_s = 0;
  int64_t param_bytes = 0;       // f32 parameters (gradients and optimizer state scale with it)
  int64_t activation_bytes = 0;  // per micro-batch: what forward saves for backward
  int64_t output_bytes = 0;      // per micro-batch: what crosses a stage boundary after this layer

  double total_s() const { return forward_s + backward_input_s + backward_weight_s; }
};

// A roofline estimate: each call takes max(FLOPs / flops_per_second, bytes moved /
// bytes_per_second), so layers with ~0 FLOPs (reshape, pooling, activations) still cost the
// time to stream their tensors, and small-batch GEMMs cost at least one read of their weights.
// The defaults are one core of our machines (ARCHITECTURE.md: ~100-180 GFLOP/s, ~30 GB/s).
std::vector<LayerProfile> estimate_costs(const Model& model, int64_t microbatch_size,
                                         double flops_per_second = 100e9,
                                         double bytes_per_second = 30e9);

// Measures every layer on `backend`: instantiates all parameters there (StageParameters over
// the whole model), feeds a random (microbatch_size, ...input_shape) input through the layers
// one by one and times forward, backward_input and backward_weight of each (a random upstream
// gradient of the output's shape), reporting the median of `repeats` runs after one warm-up.
// activation_bytes is what the layer really saved in its LayerContext. Each timed call starts
// with caches half cold (16 MiB read first, profile_costs.cpp), as a layer mostly finds them in a
// run. Layers that were bound before (e.g. to a trainer's stages) are bound back afterwards; the
// others are left unbound, as they were.
std::vector<LayerProfile> profile_costs(const Model& model, Backend& backend,
                                        int64_t microbatch_size, int repeats = 3,
                                        uint64_t seed = 0);

// profile_costs on every device of `devices` at once, each on its own thread with its own model
// from make_model(): a run keeps all its devices busy, and CPU devices share the machine's memory
// bandwidth (and clock), so a layer timed alone is faster than the same layer in a run (about 10%
// here, ARCHITECTURE.md). Per layer, the mean of the devices' times; bytes from the first device.
// One device: profile_costs on it.
std::vector<LayerProfile> profile_costs_together(const std::function<Model()>& make_model,
                                                 const std::vector<Backend*>& devices,
                                                 int64_t microbatch_size, int repeats = 3,
                                                 uint64_t seed = 0);

}  // namespace pt
