// Host buffers handed to the NCCL communicator: told apart from device memory (classify) and
// copied through page-locked blocks that NCCL's kernels read and write directly (PinnedPool,
// Staging), so callers may pass either kind.
#include <algorithm>
#include <bit>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/cuda/nccl_internal.h"

namespace pt::cuda::nccl_detail {

Pinned PinnedPool::acquire(int gpu, size_t bytes, const std::string& where) {
  std::vector<Pinned>& free = free_[gpu];
  auto best = free.end();
  for (auto it = free.begin(); it != free.end(); ++it)
    if (it->bytes >= bytes && (best == free.end() || it->bytes < best->bytes)) best = it;
  if (best != free.end()) {
    const Pinned block = *best;
    free.erase(best);
    return block;
  }
  constexpr size_t kMiB = size_t{1} << 20;
  const size_t size = bytes <= kMiB ? std::max<size_t>(4096, std::bit_ceil(bytes))
                                    : (bytes + kMiB - 1) / kMiB * kMiB;
  void* host = nullptr;
  check(cudaHostAlloc(&host, size, cudaHostAllocPortable | cudaHostAllocMapped), where,
        "cudaHostAlloc (page-locked staging for a host buffer)");
  void* device = nullptr;
  check(cudaHostGetDevicePointer(&device, host, 0), where, "cudaHostGetDevicePointer");
  return Pinned{static_cast<std::byte*>(host), device, size};
}

void PinnedPool::release(int gpu, Pinned block) {
  if (block.host != nullptr) free_[gpu].push_back(block);
}

PinnedPool& pinned_pool() {
  static auto* pool = new PinnedPool;
  return *pool;
}

Memory classify(const void* p, int gpu, std::string_view what, std::string_view role,
                const std::string& who) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();  // runtimes that reject unregistered host memory
    return Memory::host;
  }
  switch (attributes.type) {
    case cudaMemoryTypeDevice:
      if (attributes.device != gpu)
        throw UsageError(
            fmt::format("{}: {}: the {} buffer is memory of cuda:{}, but this communicator runs on "
                        "cuda:{}; NCCL takes memory of its own GPU (or host memory)",
                        what, who, role, attributes.device, gpu));
      return Memory::device;
    case cudaMemoryTypeManaged: return Memory::device;
    default: return Memory::host;  // pageable or page-locked host memory
  }
}

Staging::Staging(State& state, const void* user, size_t window, std::string_view what,
                 std::string_view role)
    : state_(state), user_(static_cast<std::byte*>(const_cast<void*>(user))) {
  if (user == nullptr)
    throw UsageError(fmt::format("{}: {}: the {} buffer is null", what, state.describe, role));
  if (classify(user, state.gpu, what, role, state.who) == Memory::device) return;
  std::lock_guard lock(nccl_mutex());
  block_ = pinned_pool().acquire(state.gpu, window, fmt::format("{}: {}", what, state.who));
}

Staging::~Staging() {
  if (block_.host == nullptr) return;
  std::lock_guard lock(nccl_mutex());
  pinned_pool().release(state_.gpu, block_);
}

}  // namespace pt::cuda::nccl_detail
