#pragma once
// What ends every training step once its gradients are complete, on one device (Trainer) and in a
// pipeline alike, in one order so both give the same bits:
//   1. tied parameters: every copy gets the sum of the copies' gradients
//   (engine/train/tied_gradients.h)
//   2. the global gradient norm over all stages, in global parameter order
//   3. a non-finite norm skips the step everywhere; otherwise gradients are scaled for clipping
//   4. each stage's optimizer steps on its own device
// The sharded optimizer runs the same sequence around its collectives
// (engine/update/sharded_update.cpp).
#include <functional>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/train/stage_state.h"
#include "layers/model.h"

namespace pt {

struct EpilogueConfig {
  float clip_norm = 0.f;  // 0: no clipping
  float lr = 0.f;         // this step's learning rate
  // Set when some stages are in other processes: the pipeline communicator (rank = schedule
  // device) and the device that holds each layer.
  Communicator* pipeline_group = nullptr;
  std::function<int(int layer)> device_of_layer;
  // Tensor parallelism: the group of this pipeline copy's tensor ranks (one communicator over
  // the T copies; nullable: T = 1), over which the gradient norm is completed.
  Communicator* tensor_parallel_group = nullptr;
  // Runs job(i) for every stage i of `stages`, each on its device's thread where there are
  // several; empty: in order on the calling thread.
  std::function<void(const std::function<void(size_t stage)>& job)> for_each_stage;

  // job(i) for the `count` held stages: through for_each_stage where set, else in order here.
  void run_each_stage(size_t count, const std::function<void(size_t stage)>& job) const {
    if (for_each_stage) {
      for_each_stage(job);
    } else {
      for (size_t i = 0; i < count; ++i) job(i);
    }
  }
};

struct EpilogueResult {
  double grad_norm = 0;  // before clipping
  bool skipped = false;  // non-finite: no parameter changed
};

// `stages`: the stages held here, in stage order.
EpilogueResult finish_step(const Model& model, const std::vector<StageState>& stages,
                           const EpilogueConfig& config);

}  // namespace pt
