#pragma once
// Opening devices from a user's --devices text. "cpu:0,cpu:1" or "cpu:0..3" opens virtual CPU
// devices; "cuda:N" needs the CUDA plugin (listing a GPU twice puts two stages on it, each with
// its own streams); "auto" takes GPUs when the plugin finds any and otherwise CPU devices,
// printing one line that says why CUDA is not used.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/backend.h"
#include "engine/devices/cuda_plugin.h"

namespace pt {

struct DeviceSet {
  std::vector<std::unique_ptr<Backend>> backends;
  std::string note;  // one line for the user (e.g. why CUDA is unavailable); may be empty
};

// `count` = how many devices "auto" should open. `threads` = OpenMP threads per CPU device
// (0: the machine's cores divided evenly between the CPU devices, at least 1). `precision`
// other than fp32 needs CUDA devices, and so does `attention` cudnn or cudnn_deterministic.
// Throws UsageError naming the fix.
DeviceSet open_devices(std::string_view spec, int count, int threads,
                       CudaPrecision precision = CudaPrecision::fp32,
                       AttentionKernel attention = AttentionKernel::automatic);

// Cores available to this process (sched_getaffinity), at least 1.
int available_cores();

}  // namespace pt
