#pragma once
// What a PipelineTrainer is made from, and the checks made before anything is allocated: the
// schedule against the devices and the model, the replica against its groups.
#include <string>
#include <vector>

#include "engine/core/backend.h"
#include "engine/parallel/parallel_context.h"
#include "engine/pipeline/layout.h"
#include "engine/pipeline/recompute.h"
#include "engine/train/trainer.h"
#include "engine/update/async_delay.h"
#include "schedule/schedule.h"

namespace pt {

struct PipelineConfig {
  TrainerConfig trainer;              // M, seed, optimizer, LR schedule, clipping
  sched::Schedule schedule;           // lowered (with SEND/RECV) and validated
  std::vector<int> layers_per_stage;  // size = schedule.num_stages; sums to the model's layers
  RecomputePolicy recompute;
  double timeout_s = 60;  // every wait for a peer gives up after this long
  bool record_trace = false;
  ParallelContext parallel;  // replicas and other processes (default: none)
  // PipeDream-2BW (engine/update/async_update.h); `schedule` must then be 1F1B's. The window:
  // steps per schedule run.
  bool async_update = false;
  int async_window = 8;
  AsyncDelay async_delay = AsyncDelay::per_microbatch;  // as TrainingOptions' (uniform: 2BW's)
};

// Throws UsageError, naming what is wrong and what would fix it, unless `config` can run on
// `devices` (per schedule device; nullptr: held by another process) with `layout`. Returns the
// schedule devices held here.
std::vector<int> check_pipeline_config(const PipelineConfig& config,
                                       const std::vector<Backend*>& devices,
                                       const PipelineLayout& layout);

}  // namespace pt
