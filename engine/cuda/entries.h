#pragma once
// The plugin's entries, one per field of PtCudaPluginApi (plugin_abi.h documents them). Each is
// noexcept: nothing may unwind across the C boundary.
#include <cstddef>

#include "engine/cuda/plugin_abi.h"

namespace pt::cuda {

int probe(char* message, size_t message_size, int* device_count) noexcept;
int device_info(int device, PtCudaDeviceInfo* info, char* message, size_t message_size) noexcept;
int self_test(int device, char* message, size_t message_size) noexcept;

}  // namespace pt::cuda
