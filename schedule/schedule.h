#pragma once
// A Schedule is the whole plan of one training step: one ordered action list per device. The
// runtime executes exactly these lists (one worker per device), so the schedule is the single
// source of truth for order. Generators produce compute-only lists; lowering passes add
// communication; the validator and the simulator check and time them.
#include <string>
#include <vector>

#include "schedule/action.h"

namespace pt::sched {

struct Schedule {
  int num_devices = 1;   // D: pipeline ranks
  int num_stages = 1;    // S_total = D * V (virtual stages)
  int microbatches = 1;  // M (in all steps together)
  // Optimizer steps the lists span: 1 for every synchronous schedule; K for an asynchronous
  // window (one_f_one_b_async), whose micro-batch m belongs to step m / (microbatches / steps).
  int steps = 1;
  std::vector<int> stage_device;             // stage -> device, size num_stages
  std::vector<std::vector<Action>> actions;  // per device, in execution order

  int device_of(int stage) const { return stage_device.at(static_cast<size_t>(stage)); }
  int chunks_per_device() const { return num_stages / num_devices; }  // V
  int microbatches_per_step() const { return microbatches / steps; }
  int step_of(int microbatch) const { return microbatch / microbatches_per_step(); }

  bool operator==(const Schedule&) const = default;
};

// A schedule with empty lists and the default placement, stage k on device k % D: with
// S = D * V that is chunk c = k / D of device d = k % D (Megatron's interleaved layout).
inline Schedule empty_schedule(int num_devices, int num_stages, int microbatches) {
  Schedule s;
  s.num_devices = num_devices;
  s.num_stages = num_stages;
  s.microbatches = microbatches;
  for (int k = 0; k < num_stages; ++k) s.stage_device.push_back(k % num_devices);
  s.actions.resize(static_cast<size_t>(num_devices));
  return s;
}

}  // namespace pt::sched
