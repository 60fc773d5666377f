/* The C ABI between the engine and its CUDA plugin (libpipetrain_cuda.so).
 *
 * Plain C, no CUDA headers: the engine side (engine/cuda_plugin.cpp) includes this file without
 * knowing anything about CUDA, and the plugin (engine/cuda/) implements it. The engine dlopen()s
 * the plugin, looks up the one exported symbol PT_CUDA_PLUGIN_ENTRY and checks abi_version
 * before calling anything else.
 *
 * Rules for every entry:
 * - it never throws and never aborts: failures come back as a non-zero PtCudaResult and a
 *   one-line, NUL-terminated explanation in `message` (truncated to `message_size` bytes);
 * - `message` is the reason only; the engine adds the "CUDA unavailable: " prefix;
 * - entries may be called from any thread.
 *
 * Versioning: abi_version changes whenever an existing field changes meaning or place. New
 * entries are only ever appended, and struct_size (the plugin's sizeof(PtCudaPluginApi)) tells
 * the engine whether a plugin is new enough to have them: an entry is present iff
 * offsetof(entry) < struct_size and it is not NULL.
 *
 * Reserved for later (the CUDA Backend issue): a `create_backend(int device, ...)` entry that
 * returns an object implementing pt::Backend for one GPU will be appended after `self_test`.
 */
#ifndef PIPETRAIN_ENGINE_CUDA_PLUGIN_ABI_H
#define PIPETRAIN_ENGINE_CUDA_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PT_CUDA_PLUGIN_ABI_VERSION 1

/* The file name the engine looks for and the one symbol the plugin exports. */
#define PT_CUDA_PLUGIN_FILE_NAME "libpipetrain_cuda.so"
#define PT_CUDA_PLUGIN_ENTRY "pipetrain_cuda_plugin_api"

#if defined(__GNUC__)
#define PT_CUDA_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define PT_CUDA_PLUGIN_EXPORT
#endif

typedef enum PtCudaResult {
  PT_CUDA_OK = 0,
  PT_CUDA_UNAVAILABLE = 1, /* no driver, no device, driver too old: use the CPU backend */
  PT_CUDA_ERROR = 2        /* a device exists but a call on it failed; `message` says which */
} PtCudaResult;

typedef struct PtCudaDeviceInfo {
  char name[256];        /* "NVIDIA H200", NUL-terminated */
  uint64_t memory_bytes; /* total global memory */
  int cc_major;          /* compute capability, e.g. 9.0 */
  int cc_minor;
  int multiprocessors;
} PtCudaDeviceInfo;

typedef struct PtCudaPluginApi {
  int abi_version;    /* PT_CUDA_PLUGIN_ABI_VERSION the plugin was built with */
  size_t struct_size; /* sizeof(PtCudaPluginApi) in the plugin */

  /* Initialises the CUDA runtime and counts devices. On PT_CUDA_OK, *device_count >= 1 and
   * `message` describes the runtime ("CUDA runtime 13.0, driver 13.0"); otherwise
   * *device_count is 0 and `message` says why ("cudaGetDeviceCount failed with
   * cudaErrorInsufficientDriver (35): no NVIDIA driver is loaded on this machine"). */
  int (*probe)(char* message, size_t message_size, int* device_count);

  /* Fills *info for device `device` in [0, device_count). */
  int (*device_info)(int device, PtCudaDeviceInfo* info, char* message, size_t message_size);

  /* Runs one tiny kernel (kernels/cuda/fill.cu) on `device`, copies the result back and checks
   * it: proves that the plugin's device code matches the GPU's architecture. */
  int (*self_test)(int device, char* message, size_t message_size);
} PtCudaPluginApi;

typedef const PtCudaPluginApi* (*PtCudaPluginEntryFn)(void);

/* The plugin's one exported symbol (named by PT_CUDA_PLUGIN_ENTRY). */
PT_CUDA_PLUGIN_EXPORT const PtCudaPluginApi* pipetrain_cuda_plugin_api(void);

#ifdef __cplusplus
}
#endif

#endif /* PIPETRAIN_ENGINE_CUDA_PLUGIN_ABI_H */
