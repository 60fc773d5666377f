// CudaBackend: construction, memory, streams, copies and events (see cuda_backend.h). The ops
// are in cuda_backend_<family>.cpp; they only check arguments, pick scratch memory and read
// results back: the arithmetic is in kernels/cuda/*.cu, cublaslt_gemm.cpp and cudnn_conv.cpp.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "kernels/cuda/cublaslt_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/cuda/fill.h"

namespace pt::cuda {

namespace {

// cuBLASLt's recommended workspace for Hopper.
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
// CUDA allocations are 256-byte aligned; rounding small blocks to 512 keeps size classes few.
constexpr size_t kDeviceAlignment = 512;

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
    default: return "fp32";
  }
}

class CudaEvent final : public Event {
 public:
  CudaEvent(int device, cudaStream_t stream) : device_(device) {
    DeviceGuard guard(device_);
    cuda::check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), where(),
                "cudaEventCreate");
    cuda::check(cudaEventRecord(event_, stream), where(), "cudaEventRecord");
  }
  ~CudaEvent() override {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }
  void synchronize() override {
    cuda::check(cudaEventSynchronize(event_), where(), "cudaEventSynchronize");
  }

 private:
  std::string where() const { return fmt::format("cuda:{}", device_); }
  int device_;
  cudaEvent_t event_ = nullptr;
};

// An event with timing, for per-action traces: recording it does not wait for the GPU.
class CudaTimingEvent final : public TimingEvent {
 public:
  CudaTimingEvent(int device, cudaStream_t stream) : device_(device) {
    DeviceGuard guard(device_);
    cuda::check(cudaEventCreate(&event_), where(), "cudaEventCreate");
    cuda::check(cudaEventRecord(event_, stream), where(), "cudaEventRecord");
  }
  ~CudaTimingEvent() override {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }
  double seconds_since(TimingEvent& earlier) override {
    const auto* e = dynamic_cast<const CudaTimingEvent*>(&earlier);
    if (!e)
      throw std::logic_error("TimingEvent::seconds_since: the events come from different backends");
    DeviceGuard guard(device_);
    cuda::check(cudaEventSynchronize(event_), where(), "cudaEventSynchronize");
    float ms = 0;
    cuda::check(cudaEventElapsedTime(&ms, e->event_, event_), where(), "cudaEventElapsedTime");
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  std::string where() const { return fmt::format("cuda:{}", device_); }
  int device_;
  cudaEvent_t event_ = nullptr;
};

// An event used once to order two streams: `waiter` (on any GPU) waits for what is queued on
// `stream` now. The event is created and recorded on the stream's GPU (its context).
void fence(int stream_device, cudaStream_t stream, cudaStream_t waiter, const std::string& where) {
  DeviceGuard guard(stream_device);
  cudaEvent_t e = nullptr;
  cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), where, "cudaEventCreate");
  cudaError_t rc = cudaEventRecord(e, stream);
  if (rc == cudaSuccess) rc = cudaStreamWaitEvent(waiter, e, 0);
  (void)cudaEventDestroy(e);  // destruction is deferred until the event completes
  cuda::check(rc, where, "cudaEventRecord/cudaStreamWaitEvent");
}

}  // namespace

CudaBackend::CudaBackend(int device, int slot, Precision precision, AttentionKernel attention)
    : device_(device), slot_(slot), precision_(precision), attention_(attention) {
  name_ = slot == 0 ? fmt::format("cuda:{}", device) : fmt::format("cuda:{} slot {}", device, slot);
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (device < 0 || device >= count)
    throw UsageError(fmt::format("cannot open cuda:{}: this machine has {} GPU{} (cuda:0..cuda:{})",
                                 device, count, count == 1 ? "" : "s", count - 1));
  DeviceGuard guard(device_);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
  gpu_name_ = fmt::format("{} (sm_{}{})", prop.name, prop.major, prop.minor);
  check(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "cudaStreamCreate (compute)");
  check(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate (copy)");
  const int dev = device_;
  allocator_ = std::make_unique<CachingAllocator>(
      name_, RawMemory{[dev](size_t bytes) -> void* {
                         DeviceGuard g(dev);
                         void* p = nullptr;
                         if (cudaMalloc(&p, bytes) != cudaSuccess) {
                           (void)cudaGetLastError();  // out of memory: the allocator says so
                           return nullptr;
                         }
                         return p;
                       },
                       [dev](void* p) noexcept {  // runs from destructors: never throws
                         int previous = -1;
                         const bool switched = cudaGetDevice(&previous) == cudaSuccess &&
                                               previous != dev && cudaSetDevice(dev) == cudaSuccess;
                         (void)cudaFree(p);
                         if (switched) (void)cudaSetDevice(previous);
                         (void)cudaGetLastError();
                       },
                       kDeviceAlignment});
  gemm_ = std::make_unique<LtGemm>(compute_,
                                   scratch(gemm_workspace_, kGemmWorkspaceBytes, "GEMM workspace"),
                                   kGemmWorkspaceBytes);
  conv_ = std::make_unique<CudnnConv>(compute_, precision_ != Precision::fp32);
  // Proves that this build's kernels run on this GPU before anything depends on them.
  check(launch_fill(static_cast<float*>(gemm_workspace_.data), 0.f, 1, compute_), "launch_fill");
  synchronize();
}

CudaBackend::~CudaBackend() {
  try {
    DeviceGuard guard(device_);
    (void)cudaStreamSynchronize(compute_);
    (void)cudaStreamSynchronize(copy_);
    gemm_.reset();
    conv_.reset();
    cudnn_attention_.reset();
    for (Scratch* s : {&gemm_workspace_, &operands_, &conv_workspace_, &partials_,
                       &attention_operands_, &attention_workspace_, &embedding_scratch_})
      if (s->data != nullptr) allocator_->deallocate(s->data, s->bytes);
    allocator_.reset();
    (void)cudaStreamDestroy(copy_);
    (void)cudaStreamDestroy(compute_);
  } catch (...) {
    // A destructor must not throw; the GPU is being torn down anyway.
  }
}

std::string CudaBackend::describe() const {
  return fmt::format("{} {}, {}", name_, gpu_name_, precision_name(precision_));
}

void CudaBackend::check(cudaError_t e, const char* call) const { cuda::check(e, name_, call); }

void* CudaBackend::scratch(Scratch& s, size_t bytes, const char* purpose) {
  if (bytes <= s.bytes) return s.data;
  if (s.data != nullptr) allocator_->deallocate(s.data, s.bytes);  // reused only by later work
  s = Scratch{};
  try {
    s.data = allocator_->allocate(bytes);
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(fmt::format("{} (for the {})", e.what(), purpose));
  }
  s.bytes = bytes;
  return s.data;
}

void CudaBackend::read_back(void* host, const void* src, size_t bytes) {
  check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, compute_),
        "cudaMemcpyAsync (result)");
  check(cudaStreamSynchronize(compute_), "cudaStreamSynchronize");
}

// ---- memory ---------------------------------------------------------------------------------

void* CudaBackend::allocate(size_t bytes) { return allocator_->allocate(bytes); }
void CudaBackend::deallocate(void* ptr, size_t bytes) { allocator_->deallocate(ptr, bytes); }
MemoryStats CudaBackend::memory_stats() const { return allocator_->stats(); }
void CudaBackend::reset_peak() { allocator_->reset_peak(); }
void CudaBackend::set_memory_limit(size_t bytes) { allocator_->set_limit(bytes); }

// ---- copies and synchronisation -------------------------------------------------------------

// The caller may reuse host_src as soon as we return. From pageable memory (vectors: the
// engine's inputs and parameters) cudaMemcpyAsync returns only once the bytes are in the
// driver's staging memory, without waiting for the stream, so the host keeps queueing work while
// the GPU catches up. From page-locked memory the copy would still be reading it: wait then.
void CudaBackend::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(device_);
  check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, compute_),
        "cudaMemcpyAsync (from host)");
  cudaPointerAttributes attributes{};
  const bool known = cudaPointerGetAttributes(&attributes, host_src) == cudaSuccess;
  (void)cudaGetLastError();
  if (!known || attributes.type != cudaMemoryTypeUnregistered)
    check(cudaStreamSynchronize(compute_), "cudaStreamSynchronize");
}

void CudaBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(device_);
  read_back(host_dst, src, bytes);
}

void CudaBackend::copy_within(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(device_);
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_),
        "cudaMemcpyAsync (within)");
}

// The copy runs on this device's copy stream, after the work already queued on our compute
// stream (which produced `src`); both compute streams then wait for it, so the receiver's ops
// see the data and neither block can be reused before the copy has read or written it. The
// calling thread does not wait: other work overlaps with the copy.
// Only between CUDA backends that can reach each other: for another kind of backend, or GPUs
// without peer access (rare: different PCIe root complexes without NVLink), it returns false and
// Backend::copy_to stages the bytes through the host.
bool CudaBackend::copy_to_peer(Backend& dst_backend, void* dst, const void* src, size_t bytes) {
  auto* dst_cuda = dynamic_cast<CudaBackend*>(&dst_backend);
  if (dst_cuda == nullptr) return false;
  if (bytes == 0) return true;
  std::lock_guard lock(copy_mutex_);
  DeviceGuard guard(device_);
  if (dst_cuda->device_ != device_) {
    int can_access = 0;
    check(cudaDeviceCanAccessPeer(&can_access, device_, dst_cuda->device_),
          "cudaDeviceCanAccessPeer");
    if (!can_access) return false;
    // Peer access once per (this GPU, that GPU) pair in the process.
    static std::mutex peer_mutex;
    static std::vector<std::pair<int, int>> enabled;
    std::lock_guard peer_lock(peer_mutex);
    if (std::find(enabled.begin(), enabled.end(), std::pair{device_, dst_cuda->device_}) ==
        enabled.end()) {
      const cudaError_t e = cudaDeviceEnablePeerAccess(dst_cuda->device_, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
        check(e, "cudaDeviceEnablePeerAccess");
      (void)cudaGetLastError();
      enabled.emplace_back(device_, dst_cuda->device_);
    }
  }
  fence(device_, compute_, copy_, name_);
  fence(dst_cuda->device_, dst_cuda->compute_, copy_,
        name_);  // the receiver may still read an old tensor there
  if (dst_cuda->device_ == device_)
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, copy_),
          "cudaMemcpyAsync (to slot)");
  else
    check(cudaMemcpyPeerAsync(dst, dst_cuda->device_, src, device_, bytes, copy_),
          "cudaMemcpyPeerAsync");
  fence(device_, copy_, compute_, name_);
  fence(device_, copy_, dst_cuda->compute_, name_);
  return true;
}

std::unique_ptr<Event> CudaBackend::record_event() {
  return std::make_unique<CudaEvent>(device_, compute_);
}

std::unique_ptr<TimingEvent> CudaBackend::record_timing_event() {
  return std::make_unique<CudaTimingEvent>(device_, compute_);
}

void CudaBackend::synchronize() {
  DeviceGuard guard(device_);
  check(cudaStreamSynchronize(compute_), "cudaStreamSynchronize");
}

void CudaBackend::bind_current_thread() { check(cudaSetDevice(device_), "cudaSetDevice"); }

}  // namespace pt::cuda
