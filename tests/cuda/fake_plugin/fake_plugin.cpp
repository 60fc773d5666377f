// A stand-in for libpipetrain_cuda.so, built without CUDA, so that the loader's paths (devices
// found, probe failure, wrong ABI, failing device query) are tested on machines without a GPU.
// The behaviour is chosen per call by the environment variable PT_FAKE_CUDA_PLUGIN_MODE:
//   two_devices (default) | no_driver | bad_abi | device_error | null_table | other_build |
//   backend_error
// Its create_backend hands out a CPU backend, so that the engine's side of the object entries
// (ownership, slots, errors) runs here too.
// Compiled with -DPT_FAKE_NO_ENTRY it exports no entry symbol at all.
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "engine/cuda/plugin_abi.h"
#include "kernels/cpu/cpu_backend.h"
#include "pipetrain/build_id.h"

namespace {

std::string_view mode() {
  const char* m = std::getenv("PT_FAKE_CUDA_PLUGIN_MODE");
  return m != nullptr ? m : "two_devices";
}

void write(char* message, size_t size, const char* text) {
  if (message == nullptr || size == 0) return;
  std::strncpy(message, text, size - 1);
  message[size - 1] = '\0';
}

int fake_probe(char* message, size_t message_size, int* device_count) {
  if (mode() == "no_driver") {
    *device_count = 0;
    write(message, message_size, "fake: no driver");
    return PT_CUDA_UNAVAILABLE;
  }
  *device_count = 2;
  write(message, message_size, "CUDA runtime 99.0, driver 99.1");
  return PT_CUDA_OK;
}

int fake_device_info(int device, PtCudaDeviceInfo* info, char* message, size_t message_size) {
  if (mode() == "device_error" && device == 1) {
    write(message, message_size, "fake: cudaGetDeviceProperties(cuda:1) failed");
    return PT_CUDA_ERROR;
  }
  *info = PtCudaDeviceInfo{};
  write(info->name, sizeof(info->name), device == 0 ? "Fake GPU A" : "Fake GPU B");
  info->memory_bytes = (uint64_t{80} << 30) * static_cast<uint64_t>(device + 1);
  info->cc_major = 9;
  info->cc_minor = device;
  info->multiprocessors = 132;
  write(info->pci_bus_id, sizeof(info->pci_bus_id), device == 0 ? "0000:3b:00.0" : "0000:5e:00.0");
  write(message, message_size, "");
  return PT_CUDA_OK;
}

int fake_self_test(int, char* message, size_t message_size) {
  write(message, message_size, "fake self-test passed");
  return PT_CUDA_OK;
}

// Slot s of GPU d becomes cpu:(10 d + s), so a test can see which one it got.
int fake_create_backend(const PtCudaBackendOptions* options, void** backend_out, char* message,
                        size_t message_size) {
  if (mode() == "backend_error") {
    write(message, message_size,
          "fake: cudaStreamCreate failed with cudaErrorMemoryAllocation (2)");
    return PT_CUDA_ERROR;
  }
  auto backend = pt::make_cpu_backend(10 * options->device + options->slot, 1);
  *backend_out = static_cast<pt::Backend*>(backend.release());
  write(message, message_size, "");
  return PT_CUDA_OK;
}

int fake_nccl_unique_id(unsigned char*, char* message, size_t message_size) {
  write(message, message_size, "fake: no NCCL");
  return PT_CUDA_UNAVAILABLE;
}

int fake_create_nccl(const unsigned char*, int, int, const int*, const char*, void*, double, void**,
                     char* message, size_t message_size) {
  write(message, message_size, "fake: no NCCL");
  return PT_CUDA_UNAVAILABLE;
}

// Unused in the PT_FAKE_NO_ENTRY variant (a library without the entry point).
[[maybe_unused]] const PtCudaPluginApi kApi = {
    PT_CUDA_PLUGIN_ABI_VERSION, sizeof(PtCudaPluginApi), &fake_probe,
    &fake_device_info,          &fake_self_test,         PIPETRAIN_BUILD_ID,
    &fake_create_backend,       &fake_nccl_unique_id,    &fake_create_nccl};
[[maybe_unused]] const PtCudaPluginApi kBadAbi = {999,
                                                  sizeof(PtCudaPluginApi),
                                                  &fake_probe,
                                                  &fake_device_info,
                                                  &fake_self_test,
                                                  PIPETRAIN_BUILD_ID,
                                                  &fake_create_backend,
                                                  &fake_nccl_unique_id,
                                                  &fake_create_nccl};
[[maybe_unused]] const PtCudaPluginApi kOtherBuild = {
    PT_CUDA_PLUGIN_ABI_VERSION, sizeof(PtCudaPluginApi), &fake_probe,
    &fake_device_info,          &fake_self_test,         "0.0.0-someotherbuild",
    &fake_create_backend,       &fake_nccl_unique_id,    &fake_create_nccl};

}  // namespace

#ifndef PT_FAKE_NO_ENTRY
extern "C" PT_CUDA_PLUGIN_EXPORT const PtCudaPluginApi* pipetrain_cuda_plugin_api(void) {
  if (mode() == "bad_abi") return &kBadAbi;
  if (mode() == "null_table") return nullptr;
  if (mode() == "other_build") return &kOtherBuild;
  return &kApi;
}
#else
extern "C" PT_CUDA_PLUGIN_EXPORT int pipetrain_not_a_plugin(void) { return 0; }
#endif
