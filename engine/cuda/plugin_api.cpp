// The plugin's one exported symbol: the table of entries the engine calls (plugin_abi.h).
#include "engine/cuda/entries.h"
#include "engine/cuda/plugin_abi.h"
#include "pipetrain/build_id.h"

namespace {

const PtCudaPluginApi kApi = {
    PT_CUDA_PLUGIN_ABI_VERSION, sizeof(PtCudaPluginApi),   &pt::cuda::probe,
    &pt::cuda::device_info,     &pt::cuda::self_test,      PIPETRAIN_BUILD_ID,
    &pt::cuda::create_backend,  &pt::cuda::nccl_unique_id, &pt::cuda::create_nccl_communicator,
};

}  // namespace

extern "C" PT_CUDA_PLUGIN_EXPORT const PtCudaPluginApi* pipetrain_cuda_plugin_api(void) {
  return &kApi;
}
