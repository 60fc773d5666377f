// CpuBackend: construction, memory, copies, events and threads. The ops are in cpu_*.cpp.
#include "kernels/cpu/cpu_backend.h"

#include <omp.h>

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>

#include "engine/core/error.h"

namespace pt {

namespace {

// Work on the CPU is synchronous, so an event is complete when it is made.
class CpuEvent final : public Event {
 public:
  void synchronize() override {}
};

void check_threads(int threads, DeviceId device) {
  if (threads < 1)
    throw UsageError(
        fmt::format("{}: thread count must be at least 1, got {}", device.str(), threads));
}

// 64-byte aligned host memory: a cache line, and what AVX-512 loads like.
RawMemory cpu_memory() {
  constexpr size_t kAlignment = 64;
  return RawMemory{[](size_t bytes) { return std::aligned_alloc(kAlignment, bytes); },
                   [](void* ptr) { std::free(ptr); }, kAlignment};
}

}  // namespace

CpuBackend::CpuBackend(int index, int threads)
    : device_{DeviceKind::cpu, index},
      threads_(threads),
      allocator_(DeviceId{DeviceKind::cpu, index}.str(), cpu_memory()) {
  check_threads(threads, device_);
}

CpuBackend::~CpuBackend() = default;

std::string CpuBackend::describe() const {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{} ({} thread{}, oneDNN {}.{}.{})", device_.str(), threads_,
                     threads_ == 1 ? "" : "s", v->major, v->minor, v->patch);
}

// ---- memory -------------------------------------------------------------------------------

void* CpuBackend::allocate(size_t bytes) { return allocator_.allocate(bytes); }
void CpuBackend::deallocate(void* ptr, size_t bytes) { allocator_.deallocate(ptr, bytes); }
MemoryStats CpuBackend::memory_stats() const { return allocator_.stats(); }
void CpuBackend::reset_peak() { allocator_.reset_peak(); }
void CpuBackend::set_memory_limit(size_t bytes) { allocator_.set_limit(bytes); }
size_t CpuBackend::cached_bytes() const { return allocator_.cached_bytes(); }
void CpuBackend::release_cache() { allocator_.release_cache(); }

// ---- copies and synchronisation -----------------------------------------------------------

void CpuBackend::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  if (bytes) std::memcpy(dst, host_src, bytes);
}

void CpuBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(host_dst, src, bytes);
}

void CpuBackend::copy_within(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}

// Only CPU devices: their work is synchronous, so a memcpy is ordered with both. Any other
// backend is reached by Backend::copy_to, through that backend's copy_from_host.
bool CpuBackend::copy_to_peer(Backend& dst_backend, void* dst, const void* src, size_t bytes) {
  if (dynamic_cast<CpuBackend*>(&dst_backend) == nullptr) return false;
  if (bytes) std::memcpy(dst, src, bytes);
  return true;
}

std::unique_ptr<Event> CpuBackend::record_event() { return std::make_unique<CpuEvent>(); }

// ---- threads ------------------------------------------------------------------------------

void CpuBackend::set_num_threads(int threads) {
  check_threads(threads, device_);
  threads_ = threads;
}

// omp_set_num_threads sets the calling thread's ICV only: each device's worker thread gets its
// own pool size, and oneDNN (OpenMP runtime) sizes its parallel regions from it.
void CpuBackend::bind_current_thread() { omp_set_num_threads(threads_); }

void CpuBackend::ensure_thread_binding() const {
  if (omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
}

std::unique_ptr<Backend> make_cpu_backend(int index, int threads) {
  return std::make_unique<CpuBackend>(index, threads);
}

}  // namespace pt
