/* The C ABI between the engine and its CUDA plugin (libpipetrain_cuda.so).
 *
 * Plain C, no CUDA headers: the engine side (engine/devices/cuda_plugin.cpp) includes this file
 * without knowing anything about CUDA, and the plugin (engine/cuda/, around the CUDA backend of
 * kernels/cuda/) implements it. The engine dlopen()s the plugin, looks up the one exported symbol
 * PT_CUDA_PLUGIN_ENTRY and checks abi_version before calling anything else.
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
 * From version 2 the plugin also hands out C++ objects (a pt::Backend per GPU, a
 * pt::Communicator over NCCL) as opaque pointers. That is only sound when the engine and the
 * plugin were compiled from the same headers by the same compiler, so the table carries
 * `build_id` (PIPETRAIN_BUILD_ID: the version and a hash of the headers whose classes cross the
 * boundary) and the engine refuses a plugin whose build_id differs from its own.
 */
#ifndef PIPETRAIN_ENGINE_CUDA_PLUGIN_ABI_H
#define PIPETRAIN_ENGINE_CUDA_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PT_CUDA_PLUGIN_ABI_VERSION 3

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
  char pci_bus_id[32]; /* "0000:3b:00.0": the same GPU whatever CUDA_VISIBLE_DEVICES says (v2) */
} PtCudaDeviceInfo;

/* Arithmetic of the GEMMs (and cuDNN convolutions) of a CUDA backend. Weights, gradients and
 * optimizer state stay fp32 in every mode. */
typedef enum PtCudaPrecision {
  PT_CUDA_FP32 = 0, /* fp32 inputs, fp32 math */
  PT_CUDA_TF32 = 1, /* fp32 inputs rounded to tf32 by the tensor cores, fp32 accumulation */
  PT_CUDA_BF16 = 2  /* GEMM operands converted to bf16, fp32 accumulation and output */
} PtCudaPrecision;

/* The causal-attention kernel (pt::AttentionKernel, engine/core/op_params.h). */
typedef enum PtCudaAttention {
  PT_CUDA_ATTENTION_AUTO = 0,               /* cuDNN's in bf16 where the shape suits, else native */
  PT_CUDA_ATTENTION_NATIVE = 1,             /* kernels/cuda/attention.cu */
  PT_CUDA_ATTENTION_CUDNN = 2,              /* cuDNN's fused flash attention, or an error */
  PT_CUDA_ATTENTION_CUDNN_DETERMINISTIC = 3 /* the same, with a deterministic backward */
} PtCudaAttention;

typedef struct PtCudaBackendOptions {
  int device;    /* the GPU, cuda:<device> */
  int slot;      /* 0 for the first backend on this GPU, 1 for the next, ... (own streams) */
  int precision; /* a PtCudaPrecision */
  int attention; /* a PtCudaAttention */
} PtCudaBackendOptions;

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

  /* ---- version 2 ---- */
  const char* build_id; /* must equal the engine's PIPETRAIN_BUILD_ID */

  /* Creates a pt::Backend for one GPU; *backend_out receives a `pt::Backend*` the engine owns
   * (deletes). Fails with a message when the device index is out of range or the GPU cannot be
   * initialised (e.g. no kernel image for its architecture). */
  int (*create_backend)(const PtCudaBackendOptions* options, void** backend_out, char* message,
                        size_t message_size);

  /* NCCL: a new unique id (NCCL_UNIQUE_ID_BYTES = 128 bytes) for rank 0 to broadcast. */
  int (*nccl_unique_id)(unsigned char id[128], char* message, size_t message_size);

  /* Creates a pt::Communicator over NCCL for `rank` of `nranks` on GPU `device`, all ranks
   * passing the same id; its collectives take device memory of that GPU and run on their own
   * stream, ordered after the work queued so far on `backend`'s (a pt::Backend* this plugin
   * created) compute stream. world_ranks[r] is group rank r's world rank and `name` the
   * group's name, both for describe() and error messages. *comm_out receives a `pt::Communicator*`
   * the engine owns. */
  int (*create_nccl_communicator)(const unsigned char id[128], int nranks, int rank,
                                  const int* world_ranks /* nranks: for messages */,
                                  const char* name, void* backend, double timeout_s,
                                  void** comm_out, char* message, size_t message_size);
} PtCudaPluginApi;

typedef const PtCudaPluginApi* (*PtCudaPluginEntryFn)(void);

/* The plugin's one exported symbol (named by PT_CUDA_PLUGIN_ENTRY). */
PT_CUDA_PLUGIN_EXPORT const PtCudaPluginApi* pipetrain_cuda_plugin_api(void);

#ifdef __cplusplus
}
#endif

#endif /* PIPETRAIN_ENGINE_CUDA_PLUGIN_ABI_H */
