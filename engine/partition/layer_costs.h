#pragma once
// What the partitioner knows about each layer: time of its three calls and the bytes it holds,
// per micro-batch. Two sources with one result type, so the partitioner never cares which:
//   estimate_costs - from LayerCost (FLOPs, saved bytes) and two machine rates; no device needed;
//   profile_costs  - by running every layer on a real backend and timing each call.
#include <cstdint>
#include <functional>
#include <string>
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
  // Of forward_s, the wait for full sharding's parameter all-gather (engine/plan/full_shard.h; 0
  // otherwise). A recomputed forward runs just before its backward, which then finds the
  // parameters still gathered: the backward's gather is already in backward_input_s, so the
  // recomputation is charged forward_s without this (recompute_cost.h).
  double forward_gather_s = 0;

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
// the whole model) and runs a random (microbatch_size, ...input_shape) input forward through the
// layers, then a random upstream gradient backward (backward_input and backward_weight, layer by
// layer), as a training step does, timing every call; the median of `repeats` such passes after
// one warm-up. No cache state is set up: each layer finds what the pass before it left, as in a
// run. activation_bytes is what the layer really saved in its LayerContext. Layers that were
// bound before (e.g. to a trainer's stages) are bound back afterwards; the others are left
// unbound, as they were.
std::vector<LayerProfile> profile_costs(const Model& model, Backend& backend,
                                        int64_t microbatch_size, int repeats = 3,
                                        uint64_t seed = 0);

// Profiles measured as a pipeline run finds the machine: every device of `devices` at once, each
// on its own thread with its own model from make_model(), device d running one contiguous chunk
// of the layers (chunks balanced by estimated time, as stages are; never inside a skip
// connection) the way profile_costs runs the whole model. CPU devices share the memory bandwidth
// and the last-level cache: a stage's layers find the cache holding its own weights while the
// other stages stream theirs (profile_costs.cpp has the measurements). More devices than chunks:
// the chunks run on several devices and their times are averaged. `chunks`: how many (a
// pipeline's devices per replica; 0: one per device). One device: profile_costs.
std::vector<LayerProfile> profile_costs_together(const std::function<Model()>& make_model,
                                                 const std::vector<Backend*>& devices,
                                                 int64_t microbatch_size, int repeats = 3,
                                                 uint64_t seed = 0, int chunks = 0);

// Layer costs at one micro-batch size, measured, and where ("cpu:0..cpu:1 at once"), for a
// plan's report: what a plan asks for when the costs are profiled.
struct LayerProfiler {
  std::function<std::vector<LayerProfile>(int64_t microbatch_size)> measure;
  std::string where;
};

// profile_costs_together on `devices` in `chunks` chunks (0: one per device); profile_costs of
// `model` on the first device when there is one device or no make_model. `model` and the devices
// must outlive the profiler.
LayerProfiler profiler_on(const Model& model, const std::function<Model()>& make_model,
                          const std::vector<Backend*>& devices, int chunks = 0);

}  // namespace pt
