#pragma once
// What a training step costs besides its schedule's actions, so the planner predicts the whole
// step and not only the pipeline (planner.h). PipelineTrainer::train_step, per replica:
//   1. the schedule (simulated: plan.h) and the gradient all-reduce (planner.h's allreduce_s);
//      no pass zeroes the gradients before it: each layer's first weight gradient writes them;
//   2. the global gradient norm over its stages, on the replica's thread, one after another;
//   3. the optimizer update, each device its own stages' on its own thread, all at once.
// Step 2 streams the replica's gradients once; step 3 streams the parameters, the
// gradients and the optimizer state of the device with the most parameters. On a CPU these
// passes are bound by memory bandwidth, which the other devices' cores share: measured with
// every device doing the same at once, as a step does.
#include <cstdint>
#include <vector>

#include "engine/core/backend.h"
#include "engine/optim/optimizer.h"

namespace pt {

struct StepOverheads {
  double serial_s_per_param = 0;  // 2 above: the norm, per parameter
  double update_s_per_param = 0;  // 3: the optimizer's update, per parameter

  // Seconds of 2 + 3 for a replica of `replica_params` whose fullest device holds
  // `most_params_on_a_device`.
  double seconds(int64_t replica_params, int64_t most_params_on_a_device) const {
    return serial_s_per_param * static_cast<double>(replica_params) +
           update_s_per_param * static_cast<double>(most_params_on_a_device);
  }
};

// From the bytes each pass streams at `bytes_per_second` (f32): the norm reads the gradients;
// the update reads parameters, gradients and `optimizer_slots` state
// tensors and writes the parameters and the state.
StepOverheads estimate_step_overheads(int optimizer_slots, double bytes_per_second = 30e9);

// Measured: every device, on its own thread and at once, takes the norm of and updates
// (with `optimizer`) `params` parameters of its own; the median of `repeats` timed rounds after
// one warm-up, per parameter, averaged over the devices. `params` >= 1.
StepOverheads measure_step_overheads(const std::vector<Backend*>& devices,
                                     const OptimizerConfig& optimizer, int64_t params,
                                     int repeats = 5);

// The in-process gradient all-reduce among the threads of `devices` (one replica each, as
// single-process data parallelism runs it), as the planner's ring model: seconds =
// 2(R-1)/R x bytes / bytes_per_second + 2(R-1) x latency_s. Measured with `bytes` (the largest
// gradient a device would reduce) and with one float (the latency); the median of `repeats`.
struct AllReduceRate {
  double bytes_per_second = 0;
  double latency_s = 0;
};
AllReduceRate measure_in_process_allreduce(const std::vector<Backend*>& devices, int64_t bytes,
                                           int repeats = 5);

}  // namespace pt
