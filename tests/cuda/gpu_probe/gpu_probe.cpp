// gpu_probe (ctest label "gpu"): on a machine with a GPU, loads the CUDA plugin, lists the devices
// and runs the plugin's self-test (a fill kernel, checked on the host) on each. Exits 77 (ctest:
// skipped) when CUDA is unavailable, 1 when a self-test fails.
#include <cstddef>
#include <cstdio>

#include "engine/cuda/plugin_abi.h"
#include "engine/devices/cuda_plugin.h"

int main() {
  const pt::CudaStatus& status = pt::cuda_status();
  std::printf("%s\n", status.message.c_str());
  if (!status.available) {
    std::printf("gpu_probe: skipped (%s)\n", pt::cuda_unavailable_line().c_str());
    return 77;
  }
  std::printf("plugin: %s\n", status.plugin_path.c_str());
  int failures = 0;
  for (const pt::CudaDeviceInfo& d : status.devices) {
    std::printf("%s\n", d.str().c_str());
    const PtCudaPluginApi* api = status.api;
    if (api->struct_size < offsetof(PtCudaPluginApi, self_test) + sizeof(api->self_test) ||
        api->self_test == nullptr) {
      std::printf("  the plugin has no self_test entry\n");
      ++failures;
      continue;
    }
    char message[1024] = {};
    const int rc = api->self_test(d.index, message, sizeof(message));
    std::printf("  %s: %s\n", rc == PT_CUDA_OK ? "ok" : "FAILED", message);
    if (rc != PT_CUDA_OK) ++failures;
  }
  return failures == 0 ? 0 : 1;
}
