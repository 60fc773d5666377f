#pragma once
// The gradient all-reduce of one contiguous range, wherever the gradients live: in place when the
// communicator can read that memory (a host backend, or NCCL on a GPU), else through a host copy
// (a GPU's gradients with MPI). Used by the bucketed reducer and by the asynchronous pipeline's
// per-stage UPDATE; the sharded optimizer stages its ranges itself (StageShard::host_view).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/backend.h"

namespace pt {

// Whether gradients on `backend` must go through host memory to be reduced over `group`.
inline bool needs_host_staging(const Backend& backend, const Communicator& group) {
  return !backend.host_accessible() && !group.device_memory();
}

// Sums `count` floats at `grads` (memory of `backend`) over `group`, in place; `staging` is the
// reusable host buffer for the staged case. The copies are queued on the device's stream after
// the work that produced the gradients. `what` names the operation in a timeout.
void all_reduce_gradients(Backend& backend, Communicator& group, float* grads, int64_t count,
                          std::vector<float>& staging, const std::string& what);

}  // namespace pt
