#pragma once
// Turning CUDA runtime errors into exceptions that name the device and the call. Inside the
// plugin only (the CUDA backend and the engine's side of the plugin, engine/cuda/); the C entries
// (engine/cuda/entries.h) catch them and hand the message to the engine.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace pt::cuda {

// "cudaErrorInsufficientDriver (35)".
inline std::string error_name(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + std::to_string(static_cast<int>(e)) + ")";
}

// Throws std::runtime_error "<where>: <call> failed with <name> (<code>): <text>".
inline void check(cudaError_t e, const std::string& where, const char* call) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a sticky launch error so the next call reports its own
  throw std::runtime_error(where + ": " + call + " failed with " + error_name(e) + ": " +
                           cudaGetErrorString(e));
}

// Makes `device` current on this thread for the guard's lifetime and restores the previous one:
// several backends (and the NCCL communicator) are driven from the same threads.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    (void)cudaGetDevice(&previous_);
    if (previous_ != device)
      check(cudaSetDevice(device), "cuda:" + std::to_string(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace pt::cuda
