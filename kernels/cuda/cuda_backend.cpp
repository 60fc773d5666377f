// CudaBackend: memory, streams, copies and the op dispatch (see cuda_backend.h). The arithmetic
// is in kernels/cuda/*.cu, cublaslt_gemm.cpp and cudnn_conv.cpp; this file only checks
// arguments, picks scratch memory and reads results back.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cublaslt_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/fill.h"
#include "kernels/cuda/loss.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/optimizer.h"
#include "kernels/cuda/pool.h"
#include "kernels/cuda/reduce.h"

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

GemmPrecision gemm_precision(Precision p) {
  switch (p) {
    case Precision::tf32: return GemmPrecision::tf32;
    case Precision::bf16: return GemmPrecision::bf16;
    default: return GemmPrecision::fp32;
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

CudaBackend::CudaBackend(int device, int slot, Precision precision)
    : device_(device), slot_(slot), precision_(precision) {
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
    for (Scratch* s : {&gemm_workspace_, &operands_, &conv_workspace_, &partials_})
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

// ---- GEMM -----------------------------------------------------------------------------------

void CudaBackend::gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                       float* C, int64_t ldc) {
  lt_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
}

void CudaBackend::gemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                            const float* A, int64_t lda, const float* B, int64_t ldb,
                            const float* bias, float* C, int64_t ldc) {
  // No product, or no cuBLASLt algorithm with the bias epilogue for this shape: the base class's
  // gemm then add_bias.
  if (K == 0 || !bias_epilogue_) {
    Backend::gemm_bias(trans_a, trans_b, M, N, K, A, lda, B, ldb, bias, C, ldc);
    return;
  }
  try {
    lt_gemm(trans_a, trans_b, M, N, K, 1.f, A, lda, B, ldb, 0.f, C, ldc, bias);
  } catch (const LtNoAlgorithm&) {  // nothing was queued but harmless bf16 conversions
    bias_epilogue_ = false;
    Backend::gemm_bias(trans_a, trans_b, M, N, K, A, lda, B, ldb, bias, C, ldc);
  }
}

void CudaBackend::lt_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                          float* C, int64_t ldc, const float* bias) {
  if (M == 0 || N == 0) return;
  DeviceGuard guard(device_);
  if (K == 0 && ldc == N) {  // C = beta * C: nothing to multiply, and cuBLASLt rejects k = 0
    if (beta == 0.f)
      check(launch_fill(C, 0.f, M * N, compute_), "launch_fill");
    else if (beta != 1.f)
      check(launch_scale(beta, C, M * N, compute_), "launch_scale");
    return;
  }
  if (K == 0) {  // the same, row by row past the padding
    for (int64_t r = 0; r < M; ++r) {
      if (beta == 0.f)
        check(launch_fill(C + r * ldc, 0.f, N, compute_), "launch_fill");
      else if (beta != 1.f)
        check(launch_scale(beta, C + r * ldc, N, compute_), "launch_scale");
    }
    return;
  }
  const GemmPrecision precision = gemm_precision(precision_);
  const uint16_t* a16 = nullptr;
  const uint16_t* b16 = nullptr;
  if (precision == GemmPrecision::bf16) {
    // Operands as stored: rows x leading dimension, the last row only up to its last column.
    const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
    const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    const int64_t a_elems = (a_rows - 1) * lda + a_cols, b_elems = (b_rows - 1) * ldb + b_cols;
    auto* base = static_cast<uint16_t*>(
        scratch(operands_, static_cast<size_t>(a_elems + b_elems) * sizeof(uint16_t) + 256,
                "bf16 GEMM operands"));
    uint16_t* a_copy = base;
    // Keep B's copy 256-byte aligned, as cuBLASLt prefers.
    uint16_t* b_copy = base + (a_elems + 127) / 128 * 128;
    check(launch_f32_to_bf16(A, a_copy, a_elems, compute_), "launch_f32_to_bf16 (A)");
    check(launch_f32_to_bf16(B, b_copy, b_elems, compute_), "launch_f32_to_bf16 (B)");
    a16 = a_copy;
    b16 = b_copy;
  }
  gemm_->gemm(precision, trans_a, trans_b, M, N, K, alpha, A, a16, lda, B, b16, ldb, beta, C, ldc,
              bias);
}

// ---- elementwise ----------------------------------------------------------------------------

void CudaBackend::fill(float* x, float value, int64_t n) {
  DeviceGuard guard(device_);
  check(launch_fill(x, value, n, compute_), "launch_fill");
}
void CudaBackend::add(const float* a, const float* b, float* y, int64_t n) {
  DeviceGuard guard(device_);
  check(launch_add(a, b, y, n, compute_), "launch_add");
}
void CudaBackend::axpy(float alpha, const float* x, float* y, int64_t n) {
  DeviceGuard guard(device_);
  check(launch_axpy(alpha, x, y, n, compute_), "launch_axpy");
}
void CudaBackend::scale(float alpha, float* x, int64_t n) {
  DeviceGuard guard(device_);
  check(launch_scale(alpha, x, n, compute_), "launch_scale");
}
void CudaBackend::add_bias(float* y, const float* bias, int64_t rows, int64_t cols) {
  DeviceGuard guard(device_);
  check(launch_add_bias(y, bias, rows, cols, compute_), "launch_add_bias");
}
void CudaBackend::sum_rows_accumulate(const float* x, float* out, int64_t rows, int64_t cols) {
  DeviceGuard guard(device_);
  check(launch_sum_rows_accumulate(x, out, rows, cols, compute_), "launch_sum_rows_accumulate");
}
void CudaBackend::activation_forward(Activation f, const float* x, float* y, int64_t n) {
  DeviceGuard guard(device_);
  check(launch_activation_forward(f, x, y, n, compute_), "launch_activation_forward");
}
void CudaBackend::activation_backward(Activation f, const float* x, const float* y, const float* dy,
                                      float* dx, int64_t n) {
  DeviceGuard guard(device_);
  check(launch_activation_backward(f, x, y, dy, dx, n, compute_), "launch_activation_backward");
}
void CudaBackend::dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t key) {
  DeviceGuard guard(device_);
  check(launch_dropout_forward(x, y, n, p, key, compute_), "launch_dropout_forward");
}
void CudaBackend::dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t key) {
  DeviceGuard guard(device_);
  check(launch_dropout_backward(dy, dx, n, p, key, compute_), "launch_dropout_backward");
}

// ---- normalisation --------------------------------------------------------------------------

void CudaBackend::layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                                    float* mean, float* rstd, int64_t rows, int64_t cols,
                                    float eps) {
  DeviceGuard guard(device_);
  check(launch_layernorm_forward(x, gamma, beta, y, mean, rstd, rows, cols, eps, compute_),
        "launch_layernorm_forward");
}
void CudaBackend::layernorm_backward_input(const float* dy, const float* x, const float* gamma,
                                           const float* mean, const float* rstd, float* dx,
                                           int64_t rows, int64_t cols) {
  DeviceGuard guard(device_);
  check(launch_layernorm_backward_input(dy, x, gamma, mean, rstd, dx, rows, cols, compute_),
        "launch_layernorm_backward_input");
}
void CudaBackend::layernorm_backward_weight(const float* dy, const float* x, const float* mean,
                                            const float* rstd, float* dgamma, float* dbeta,
                                            int64_t rows, int64_t cols) {
  DeviceGuard guard(device_);
  check(launch_layernorm_backward_weight(dy, x, mean, rstd, dgamma, dbeta, rows, cols, compute_),
        "launch_layernorm_backward_weight");
}

// ---- losses ---------------------------------------------------------------------------------

double CudaBackend::softmax_xent_forward(const float* logits, const int32_t* labels, float* probs,
                                         int64_t rows, int64_t classes) {
  if (rows == 0) return 0.0;
  DeviceGuard guard(device_);
  // Per-row losses and the first bad row come back to the host, which adds them in row order.
  auto* row_loss = static_cast<double*>(
      scratch(partials_, static_cast<size_t>(rows + 1) * sizeof(double), "loss partials"));
  int* first_bad = reinterpret_cast<int*>(row_loss + rows);
  check(launch_softmax_xent_forward(logits, labels, probs, row_loss, first_bad, rows, classes,
                                    compute_),
        "launch_softmax_xent_forward");
  std::vector<double> host(static_cast<size_t>(rows) + 1);
  read_back(host.data(), row_loss, host.size() * sizeof(double));
  int bad = 0;
  std::memcpy(&bad, &host[static_cast<size_t>(rows)], sizeof(int));
  if (bad < rows) {
    int32_t label = 0;
    read_back(&label, labels + bad, sizeof(label));
    throw UsageError(
        fmt::format("label {} of row {} is outside [0, {}): the data's labels do not match the "
                    "model's {} classes",
                    label, bad, classes, classes));
  }
  return std::accumulate(host.begin(), host.begin() + rows, 0.0);
}
void CudaBackend::softmax_xent_backward(const float* probs, const int32_t* labels, float* dlogits,
                                        int64_t rows, int64_t classes, float scale) {
  DeviceGuard guard(device_);
  check(launch_softmax_xent_backward(probs, labels, dlogits, rows, classes, scale, compute_),
        "launch_softmax_xent_backward");
}
double CudaBackend::mse_forward(const float* pred, const float* target, int64_t n) {
  if (n == 0) return 0.0;
  DeviceGuard guard(device_);
  auto* partials =
      static_cast<double*>(scratch(partials_, kReduceBlocks * sizeof(double), "loss partials"));
  check(launch_sum_squared_difference(pred, target, n, partials, compute_),
        "launch_sum_squared_difference");
  std::vector<double> host(kReduceBlocks);
  read_back(host.data(), partials, host.size() * sizeof(double));
  return std::accumulate(host.begin(), host.end(), 0.0);
}
void CudaBackend::mse_backward(const float* pred, const float* target, float* dpred, int64_t n,
                               float scale) {
  DeviceGuard guard(device_);
  check(launch_mse_backward(pred, target, dpred, n, scale, compute_), "launch_mse_backward");
}
int64_t CudaBackend::count_correct(const float* logits, const int32_t* labels, int64_t rows,
                                   int64_t classes) {
  if (rows == 0) return 0;
  DeviceGuard guard(device_);
  auto* count =
      static_cast<unsigned long long*>(scratch(partials_, sizeof(unsigned long long), "count"));
  check(launch_count_correct(logits, labels, rows, classes, count, compute_),
        "launch_count_correct");
  unsigned long long host = 0;
  read_back(&host, count, sizeof(host));
  return static_cast<int64_t>(host);
}

// ---- convolution and pooling ----------------------------------------------------------------

void CudaBackend::conv2d_forward(const Conv2dShape& s, const float* x, const float* w,
                                 const float* bias, float* y) {
  DeviceGuard guard(device_);
  conv_->forward(s, x, w, bias, y, [this](size_t bytes) {
    return scratch(conv_workspace_, bytes, "cuDNN workspace");
  });
}
void CudaBackend::conv2d_backward_input(const Conv2dShape& s, const float* dy, const float* w,
                                        float* dx) {
  DeviceGuard guard(device_);
  conv_->backward_input(s, dy, w, dx, [this](size_t bytes) {
    return scratch(conv_workspace_, bytes, "cuDNN workspace");
  });
}
void CudaBackend::conv2d_backward_weight(const Conv2dShape& s, const float* dy, const float* x,
                                         float* dw, float* dbias) {
  DeviceGuard guard(device_);
  conv_->backward_weight(s, dy, x, dw, dbias, [this](size_t bytes) {
    return scratch(conv_workspace_, bytes, "cuDNN workspace");
  });
}
void CudaBackend::maxpool2d_forward(const Pool2dShape& s, const float* x, float* y,
                                    int32_t* argmax) {
  DeviceGuard guard(device_);
  check(launch_maxpool2d_forward(s, x, y, argmax, compute_), "launch_maxpool2d_forward");
}
void CudaBackend::maxpool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax,
                                     float* dx) {
  DeviceGuard guard(device_);
  check(launch_maxpool2d_backward(s, dy, argmax, dx, compute_), "launch_maxpool2d_backward");
}
void CudaBackend::avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) {
  DeviceGuard guard(device_);
  check(launch_avgpool2d_forward(s, x, y, compute_), "launch_avgpool2d_forward");
}
void CudaBackend::avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) {
  DeviceGuard guard(device_);
  check(launch_avgpool2d_backward(s, dy, dx, compute_), "launch_avgpool2d_backward");
}

// ---- embedding ------------------------------------------------------------------------------

void CudaBackend::embedding_forward(const int32_t* ids, const float* table, float* y, int64_t n,
                                    int64_t dim, int64_t vocab) {
  if (n == 0) return;
  DeviceGuard guard(device_);
  int* first_bad = static_cast<int*>(scratch(partials_, sizeof(int), "id check"));
  check(launch_embedding_forward(ids, table, y, n, dim, vocab, first_bad, compute_),
        "launch_embedding_forward");
  // The same check the CPU makes, at the cost of one small read-back per forward.
  int bad = 0;
  read_back(&bad, first_bad, sizeof(bad));
  if (bad < n) {
    int32_t id = 0;
    read_back(&id, ids + bad, sizeof(id));
    throw UsageError(
        fmt::format("token id {} at position {} is outside the embedding's vocabulary [0, {}): "
                    "the data does not match the model's vocabulary size",
                    id, bad, vocab));
  }
}
void CudaBackend::embedding_backward_weight(const int32_t* ids, const float* dy, float* dtable,
                                            int64_t n, int64_t dim) {
  DeviceGuard guard(device_);
  check(launch_embedding_backward_weight(ids, dy, dtable, n, dim, compute_),
        "launch_embedding_backward_weight");
}

// ---- attention ------------------------------------------------------------------------------

namespace {
void check_head_dim(int64_t Dh) {
  if (Dh < 1 || Dh > kMaxAttentionHeadDim)
    throw UsageError(
        fmt::format("the CUDA attention kernels support head dimensions 1..{}, got {}: use more "
                    "heads (d_model / heads <= {})",
                    kMaxAttentionHeadDim, Dh, kMaxAttentionHeadDim));
}
}  // namespace

void CudaBackend::attention_forward(const float* qkv, float* out, float* lse, int64_t B, int64_t T,
                                    int64_t H, int64_t Dh, float scale) {
  check_head_dim(Dh);
  DeviceGuard guard(device_);
  check(launch_attention_forward(qkv, out, lse, B, T, H, Dh, scale, compute_),
        "launch_attention_forward");
}
void CudaBackend::attention_backward(const float* qkv, const float* out, const float* dout,
                                     const float* lse, float* dqkv, int64_t B, int64_t T, int64_t H,
                                     int64_t Dh, float scale) {
  check_head_dim(Dh);
  DeviceGuard guard(device_);
  auto* d = static_cast<float*>(scratch(partials_, static_cast<size_t>(B * H * T) * sizeof(float),
                                        "attention backward scratch"));
  check(launch_attention_backward(qkv, out, dout, lse, dqkv, d, B, T, H, Dh, scale, compute_),
        "launch_attention_backward");
}

// ---- reductions and optimizer updates -------------------------------------------------------

double CudaBackend::sum_squares(const float* x, int64_t n) {
  if (n == 0) return 0.0;
  DeviceGuard guard(device_);
  auto* partials =
      static_cast<double*>(scratch(partials_, kReduceBlocks * sizeof(double), "norm partials"));
  check(launch_sum_squares(x, n, partials, compute_), "launch_sum_squares");
  std::vector<double> host(kReduceBlocks);
  read_back(host.data(), partials, host.size() * sizeof(double));
  return std::accumulate(host.begin(), host.end(), 0.0);
}
bool CudaBackend::all_finite(const float* x, int64_t n) {
  if (n == 0) return true;
  DeviceGuard guard(device_);
  int* flag = static_cast<int*>(scratch(partials_, sizeof(int), "finite check"));
  check(launch_count_nonfinite(x, n, flag, compute_), "launch_count_nonfinite");
  int host = 0;
  read_back(&host, flag, sizeof(host));
  return host == 0;
}
void CudaBackend::sgd_update(const float* param, const float* grad, float* param_out,
                             float* momentum_buf, int64_t n, const SgdParams& p) {
  // The CPU backend's argument checks, as usage errors rather than a CUDA error code.
  require_in_place_or_disjoint("sgd_update", param, param_out, n);
  if (p.momentum != 0.f && momentum_buf == nullptr)
    throw UsageError(fmt::format(
        "sgd_update: momentum is {} but no momentum buffer was given; allocate one of {} "
        "floats",
        p.momentum, n));
  DeviceGuard guard(device_);
  check(launch_sgd_update(param, grad, param_out, momentum_buf, n, p, compute_),
        "launch_sgd_update");
}
void CudaBackend::adamw_update(const float* param, const float* grad, float* param_out, float* m,
                               float* v, int64_t n, const AdamWParams& p) {
  if (p.step < 1)
    throw UsageError(fmt::format("adamw_update: step must count from 1, got {}", p.step));
  require_in_place_or_disjoint("adamw_update", param, param_out, n);
  DeviceGuard guard(device_);
  check(launch_adamw_update(param, grad, param_out, m, v, n, p, compute_), "launch_adamw_update");
}

}  // namespace pt::cuda
