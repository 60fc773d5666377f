// The entries that hand C++ objects to the engine: a Backend per GPU and NCCL communicators.
// Exceptions become a result code and a message here, at the C boundary; the engine turns the
// message back into an exception of its own.
#include <nccl.h>

#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/cuda/entries.h"
#include "engine/cuda/nccl_communicator.h"
#include "engine/cuda/runtime_text.h"
#include "kernels/cuda/cuda_backend.h"

namespace pt::cuda {

static_assert(static_cast<int>(Precision::fp32) == PT_CUDA_FP32 &&
                  static_cast<int>(Precision::tf32) == PT_CUDA_TF32 &&
                  static_cast<int>(Precision::bf16) == PT_CUDA_BF16,
              "pt::Precision and PtCudaPrecision must agree: the engine passes one as the other");

namespace {

// Runs `body`; an exception becomes PT_CUDA_ERROR (PT_CUDA_UNAVAILABLE for a usage error such as
// a device index out of range, which the engine reports as given) and its message.
template <typename Body>
int guarded(char* message, size_t message_size, Body&& body) noexcept {
  try {
    body();
    write_message(message, message_size, "");
    return PT_CUDA_OK;
  } catch (const UsageError& e) {
    write_message(message, message_size, e.what());
    return PT_CUDA_UNAVAILABLE;
  } catch (const std::exception& e) {
    write_message(message, message_size, e.what());
    return PT_CUDA_ERROR;
  } catch (...) {
    write_message(message, message_size, "unknown exception in the CUDA plugin");
    return PT_CUDA_ERROR;
  }
}

}  // namespace

int create_backend(const PtCudaBackendOptions* options, void** backend_out, char* message,
                   size_t message_size) noexcept {
  return guarded(message, message_size, [&] {
    if (options == nullptr || backend_out == nullptr)
      throw std::runtime_error("create_backend: null argument");
    *backend_out = nullptr;
    if (options->precision < PT_CUDA_FP32 || options->precision > PT_CUDA_BF16)
      throw UsageError("unknown precision " + std::to_string(options->precision));
    if (options->attention < PT_CUDA_ATTENTION_AUTO ||
        options->attention > PT_CUDA_ATTENTION_CUDNN_DETERMINISTIC)
      throw UsageError("unknown attention kernel " + std::to_string(options->attention));
    auto* backend =
        new CudaBackend(options->device, options->slot, static_cast<Precision>(options->precision),
                        static_cast<AttentionKernel>(options->attention));
    *backend_out = static_cast<Backend*>(backend);
  });
}

int nccl_unique_id(unsigned char id[128], char* message, size_t message_size) noexcept {
  return guarded(message, message_size, [&] {
    static_assert(sizeof(ncclUniqueId) == 128, "the ABI passes NCCL unique ids as 128 bytes");
    ncclUniqueId unique{};
    const ncclResult_t rc = ncclGetUniqueId(&unique);
    if (rc != ncclSuccess)
      throw std::runtime_error(std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(rc));
    std::memcpy(id, &unique, sizeof(unique));
  });
}

int create_nccl_communicator(const unsigned char id[128], int nranks, int rank,
                             const int* world_ranks, const char* name, void* backend,
                             double timeout_s, void** comm_out, char* message,
                             size_t message_size) noexcept {
  return guarded(message, message_size, [&] {
    if (comm_out == nullptr || backend == nullptr || world_ranks == nullptr)
      throw std::runtime_error("create_nccl_communicator: null argument");
    *comm_out = nullptr;
    auto* cuda_backend = dynamic_cast<CudaBackend*>(static_cast<Backend*>(backend));
    if (cuda_backend == nullptr)
      throw UsageError("NCCL needs a CUDA device; " + static_cast<Backend*>(backend)->describe() +
                       " is not one");
    std::vector<int> ranks(world_ranks, world_ranks + nranks);
    auto* comm = new NcclCommunicator(id, nranks, rank, *cuda_backend, timeout_s,
                                      name != nullptr ? name : "nccl", std::move(ranks));
    *comm_out = static_cast<Communicator*>(comm);
  });
}

}  // namespace pt::cuda
