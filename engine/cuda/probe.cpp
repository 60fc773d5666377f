// probe and device_info: is the CUDA runtime usable here, and which GPUs does it see.
//
// Only runtime API calls (cudart): the driver library libcuda.so is never linked, so this file
// loads and runs on a machine without an NVIDIA driver and reports that in one line.
#include <cuda_runtime_api.h>

#include <exception>
#include <string>

#include "engine/cuda/entries.h"
#include "engine/cuda/runtime_text.h"

namespace pt::cuda {

namespace {

struct Versions {
  int driver = 0;   // 0 when no driver is installed
  int runtime = 0;  // the cudart this plugin loaded
};

Versions versions() {
  Versions v;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  return v;
}

// Why cudaGetDeviceCount failed, in words a user can act on.
std::string count_failure_reason(cudaError_t e, const Versions& v) {
  std::string reason = "cudaGetDeviceCount failed with " + error_name(e) + ": ";
  switch (e) {
    case cudaErrorInsufficientDriver:
      if (v.driver == 0) return reason + "no NVIDIA driver is loaded on this machine";
      return reason + "the NVIDIA driver supports CUDA " + version_text(v.driver) +
             " but the plugin was built for CUDA runtime " + version_text(v.runtime) +
             ": update the driver";
    case cudaErrorNoDevice:
      return reason + "the NVIDIA driver (CUDA " + version_text(v.driver) +
             ") sees no GPU (check CUDA_VISIBLE_DEVICES)";
    default: return reason + cudaGetErrorString(e);
  }
}

}  // namespace

int probe(char* message, size_t message_size, int* device_count) noexcept {
  try {
    if (device_count != nullptr) *device_count = 0;
    const Versions v = versions();
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // leave no error behind for the next runtime call
      write_message(message, message_size, count_failure_reason(e, v));
      return PT_CUDA_UNAVAILABLE;
    }
    if (count <= 0) {
      write_message(message, message_size,
                    "cudaGetDeviceCount found no GPU (driver CUDA " + version_text(v.driver) + ")");
      return PT_CUDA_UNAVAILABLE;
    }
    if (device_count != nullptr) *device_count = count;
    write_message(message, message_size,
                  "CUDA runtime " + version_text(v.runtime) + ", driver " + version_text(v.driver));
    return PT_CUDA_OK;
  } catch (const std::exception& ex) {
    write_message(message, message_size, std::string("CUDA probe failed: ") + ex.what());
    return PT_CUDA_ERROR;
  } catch (...) {
    write_message(message, message_size, "CUDA probe failed with an unknown exception");
    return PT_CUDA_ERROR;
  }
}

int device_info(int device, PtCudaDeviceInfo* info, char* message, size_t message_size) noexcept {
  try {
    if (info == nullptr) {
      write_message(message, message_size, "device_info called with info == NULL");
      return PT_CUDA_ERROR;
    }
    *info = PtCudaDeviceInfo{};
    cudaDeviceProp prop{};
    const cudaError_t e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      write_message(message, message_size,
                    "cudaGetDeviceProperties(cuda:" + std::to_string(device) + ") failed with " +
                        error_name(e) + ": " + cudaGetErrorString(e));
      return PT_CUDA_ERROR;
    }
    write_message(info->name, sizeof(info->name), prop.name);
    info->memory_bytes = static_cast<uint64_t>(prop.totalGlobalMem);
    info->cc_major = prop.major;
    info->cc_minor = prop.minor;
    info->multiprocessors = prop.multiProcessorCount;
    if (cudaDeviceGetPCIBusId(info->pci_bus_id, sizeof(info->pci_bus_id), device) != cudaSuccess) {
      (void)cudaGetLastError();
      info->pci_bus_id[0] = '\0';  // unknown: nccl_usable then compares device indices
    }
    write_message(message, message_size, "");
    return PT_CUDA_OK;
  } catch (...) {
    write_message(message, message_size, "device_info failed with an exception");
    return PT_CUDA_ERROR;
  }
}

}  // namespace pt::cuda
