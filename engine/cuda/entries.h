#pragma once
// The plugin's entries, one per field of PtCudaPluginApi (plugin_abi.h documents them). Each is
// noexcept: nothing may unwind across the C boundary.
#include <cstddef>

#include "engine/cuda/plugin_abi.h"

namespace pt::cuda {

int probe(char* message, size_t message_size, int* device_count) noexcept;
int device_info(int device, PtCudaDeviceInfo* info, char* message, size_t message_size) noexcept;
int self_test(int device, char* message, size_t message_size) noexcept;
int create_backend(const PtCudaBackendOptions* options, void** backend_out, char* message,
                   size_t message_size) noexcept;
int nccl_unique_id(unsigned char id[128], char* message, size_t message_size) noexcept;
int create_nccl_communicator(const unsigned char id[128], int nranks, int rank,
                             const int* world_ranks, const char* name, void* backend,
                             double timeout_s, void** comm_out, char* message,
                             size_t message_size) noexcept;

}  // namespace pt::cuda
