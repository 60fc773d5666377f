#pragma once
// Finding and loading the CUDA plugin (libpipetrain_cuda.so, built from engine/cuda/ and
// kernels/cuda/) at run time. No CUDA header here or in cuda_plugin.cpp: the engine talks to the
// plugin only through the C table in engine/cuda/plugin_abi.h, so a CPU-only run never loads
// the CUDA libraries, and a machine without the plugin or without a driver gets one line that
// says why instead of a crash.
//
// Where the plugin is looked for, in order (the first existing file is loaded):
//   1. $PIPETRAIN_CUDA_PLUGIN, a full path to the .so; if set, nothing else is tried;
//   2. <directory of the running executable>/lib/pipetrain/
//   3. <directory of the running executable>/../lib/pipetrain/   (the build tree: tests/,
//      examples/, bench/ next to lib/pipetrain/; also a prefix whose libdir is "lib")
//   4. <directory of the running executable>/../<libdir>/pipetrain/   (an installed prefix)
//   5. PIPETRAIN_PLUGIN_INSTALL_DIR, the configured install location.
// A loaded plugin is never unloaded (the CUDA runtime does not support dlclose).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/backend.h"
#include "engine/core/backend_registry.h"

struct PtCudaPluginApi;  // engine/cuda/plugin_abi.h

namespace pt {

struct CudaDeviceInfo {
  int index = 0;            // cuda:<index>
  std::string name;         // "NVIDIA H200"
  size_t memory_bytes = 0;  // total global memory
  int cc_major = 0;         // compute capability major.minor
  int cc_minor = 0;
  int multiprocessors = 0;
  std::string pci_bus_id;  // "0000:3b:00.0"; empty if the driver did not say

  // "cuda:0 NVIDIA H200 (139.8 GiB, sm_90, 132 SMs)".
  std::string str() const;
};

struct CudaStatus {
  bool available = false;
  // One line. Available: "CUDA runtime 13.0, driver 13.0: 1 device". Otherwise it starts with
  // "CUDA unavailable: " and says why, e.g.
  //   "... pipetrain was built without the CUDA plugin (nvcc not found at build time)"
  //   "... no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded: <dlerror>); the
  //    plugin /path/libpipetrain_cuda.so was not loaded"   (checked before loading the plugin)
  //   "... cannot load /path/libpipetrain_cuda.so: <dlerror>"
  //   "... cudaGetDeviceCount failed with cudaErrorInsufficientDriver (35): no NVIDIA driver is
  //    loaded on this machine"
  std::string message;
  std::vector<CudaDeviceInfo> devices;   // empty unless available
  std::string plugin_path;               // the file loaded or tried last; empty if none was
  const PtCudaPluginApi* api = nullptr;  // the plugin's table when available (for the backend)
};

// The CUDA status of this process: loads and probes the plugin on the first call, then returns
// the cached result. Thread-safe; never throws.
const CudaStatus& cuda_status();

// The line the engine prints when CUDA is unavailable ("<message>; using the CPU backend"), or
// an empty string when it is available.
std::string cuda_unavailable_line();

// Loads and probes now, reading PIPETRAIN_CUDA_PLUGIN now (tests, diagnostics). cuda_status()
// is this, called once.
CudaStatus probe_cuda();

// The directories searched for the plugin when PIPETRAIN_CUDA_PLUGIN is unset, in order
// (steps 2-5 above; empty if pipetrain was built without the plugin).
std::vector<std::string> cuda_plugin_search_dirs();

// GEMM (and convolution) arithmetic of CUDA devices; weights, gradients and optimizer state stay
// fp32 in every mode (pt::Precision, engine/core/op_params.h). Values match PtCudaPrecision.
using CudaPrecision = Precision;
const char* precision_name(CudaPrecision p);
// "fp32" | "tf32" | "bf16"; throws UsageError otherwise.
CudaPrecision parse_precision(std::string_view text);

// attention_name's spellings (engine/core/op_params.h); throws UsageError otherwise.
AttentionKernel parse_attention(std::string_view text);

// A Backend for GPU `device` from the plugin. The engine opens GPUs through the backend registry
// (kind "cuda", registered by cuda_plugin.cpp), which calls this. `slot` > 0 opens another backend
// on the same GPU (its own streams and accounting: several stages on one GPU). Throws UsageError
// with the plugin's reason ("cannot open cuda:1: ...") when CUDA is unavailable or the GPU fails.
// `status` is the process's (tests pass another).
std::unique_ptr<Backend> make_cuda_backend(int device, int slot, CudaPrecision precision,
                                           const CudaStatus& status = cuda_status());
// The same with every option the registry passes (index, slot, precision, attention).
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options,
                                           const CudaStatus& status = cuda_status());

// An NCCL communicator over the ranks of `bootstrap` (same ranks, same order, same world ranks),
// on the GPU of `backend` (a CUDA backend); its buffers are device memory and its collectives are
// ordered after the work queued on that backend. Rank 0 draws NCCL's unique id and broadcasts it
// over `bootstrap` (MPI). Collective over `bootstrap`. Throws UsageError when NCCL is unavailable
// or `backend` is not a CUDA device.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, Backend& backend,
                                                     const std::string& name);

// True when NCCL can serve `group`: CUDA is available and every rank holds a different GPU
// (NCCL refuses two ranks on one GPU). Collective over `group` (an all-gather of where each rank
// is); `backend` is this rank's device.
bool nccl_usable(Communicator& group, Backend& backend);

}  // namespace pt
