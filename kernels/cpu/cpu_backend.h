#pragma once
// The CPU backend: one object per virtual device cpu:N. Memory comes from a caching allocator
// with its own accounting; GEMM and convolution run on oneDNN, everything else is plain loops
// (see ARCHITECTURE.md). Ops run synchronously on the calling thread, using an OpenMP pool of
// num_threads() threads, so events are always complete.
//
// Determinism: every op gives bit-identical results when called twice with the same inputs and
// thread count. Reductions over rows use a fixed order that does not depend on the thread count.
//
// The op bodies live in one file per kind of op: cpu_gemm.cpp, cpu_elementwise.cpp,
// cpu_activation.cpp, cpu_norm.cpp, cpu_loss.cpp, cpu_conv.cpp, cpu_pool.cpp,
// cpu_embedding.cpp, cpu_optim.cpp (oneDNN primitives cached in dnnl_primitives.h); memory in
// engine/core/caching_allocator.* (shared with the CUDA backend), shared loop helpers in
// cpu_loops.h, vectorisable exp/tanh/erf in cpu_math.h. This header is all that other folders see.
#include <memory>
#include <string>

#include "engine/core/backend.h"
#include "engine/core/caching_allocator.h"

namespace pt {

class CpuBackend final : public Backend {
 public:
  // Device cpu:index whose ops use `threads` (>= 1) threads; throws UsageError otherwise.
  CpuBackend(int index, int threads);
  ~CpuBackend() override;

  DeviceId device() const override { return device_; }
  std::string describe() const override;

  // ---- memory -----------------------------------------------------------------------------
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  MemoryStats memory_stats() const override;
  void reset_peak() override;
  void set_memory_limit(size_t bytes) override;
  // Bytes held in the allocator's cache (freed, kept for reuse; not counted as current).
  size_t cached_bytes() const;
  // Returns every cached block to the system.
  void release_cache();

  // ---- copies and synchronisation ---------------------------------------------------------
  bool host_accessible() const override { return true; }  // the memory is host memory
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy_within(void* dst, const void* src, size_t bytes) override;
  // Into another CPU device's memory (a memcpy); false for any other kind of backend.
  bool copy_to_peer(Backend& dst_backend, void* dst, const void* src, size_t bytes) override;
  std::unique_ptr<Event> record_event() override;
  void synchronize() override {}

  // ---- threads ----------------------------------------------------------------------------
  void set_num_threads(int threads) override;
  int num_threads() const override { return threads_; }
  bool computes_on_host_cores() const override { return true; }
  void bind_current_thread() override;

  // ---- GEMM -------------------------------------------------------------------------------
  void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc) override;
  void gemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                 int64_t lda, const float* B, int64_t ldb, const float* bias, float* C,
                 int64_t ldc) override;

  // ---- elementwise ------------------------------------------------------------------------
  void fill(float* x, float value, int64_t n) override;
  void add(const float* a, const float* b, float* y, int64_t n) override;
  void axpy(float alpha, const float* x, float* y, int64_t n) override;
  void scale(float alpha, float* x, int64_t n) override;
  void add_bias(float* y, const float* bias, int64_t rows, int64_t cols) override;
  void sum_rows_accumulate(const float* x, float* out, int64_t rows, int64_t cols) override;
  void activation_forward(Activation f, const float* x, float* y, int64_t n) override;
  void activation_backward(Activation f, const float* x, const float* y, const float* dy, float* dx,
                           int64_t n) override;
  void dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t key) override;
  void dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t key) override;

  // ---- normalisation ----------------------------------------------------------------------
  void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                         float* mean, float* rstd, int64_t rows, int64_t cols, float eps) override;
  void layernorm_backward_input(const float* dy, const float* x, const float* gamma,
                                const float* mean, const float* rstd, float* dx, int64_t rows,
                                int64_t cols) override;
  void layernorm_backward_weight(const float* dy, const float* x, const float* mean,
                                 const float* rstd, float* dgamma, float* dbeta, int64_t rows,
                                 int64_t cols) override;

  // ---- losses -----------------------------------------------------------------------------
  double softmax_xent_forward(const float* logits, const int32_t* labels, float* probs,
                              int64_t rows, int64_t classes) override;
  void softmax_xent_backward(const float* probs, const int32_t* labels, float* dlogits,
                             int64_t rows, int64_t classes, float scale) override;
  double mse_forward(const float* pred, const float* target, int64_t n) override;
  void mse_backward(const float* pred, const float* target, float* dpred, int64_t n,
                    float scale) override;
  int64_t count_correct(const float* logits, const int32_t* labels, int64_t rows,
                        int64_t classes) override;
  void softmax_partials(const float* logits, const int32_t* labels, float* partials, int64_t rows,
                        const VocabRange& range) override;
  SoftmaxTotals softmax_combine(const float* partials, const int32_t* labels, float* norm,
                                int64_t parts, int64_t rows) override;
  void softmax_xent_backward_slice(const float* logits, const int32_t* labels, const float* norm,
                                   float* dlogits, int64_t rows, const VocabRange& range,
                                   float scale) override;

  // ---- convolution and pooling (NCHW) -----------------------------------------------------
  void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                      float* y) override;
  void conv2d_backward_input(const Conv2dShape& s, const float* dy, const float* w,
                             float* dx) override;
  void conv2d_backward_weight(const Conv2dShape& s, const float* dy, const float* x, float* dw,
                              float* dbias) override;
  void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, int32_t* argmax) override;
  void maxpool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax,
                          float* dx) override;
  void avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) override;
  void avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) override;

  // ---- embedding --------------------------------------------------------------------------
  void embedding_forward(const int32_t* ids, const float* table, float* y, int64_t n, int64_t dim,
                         int64_t vocab) override;
  void embedding_backward_weight(const int32_t* ids, const float* dy, float* dtable, int64_t n,
                                 int64_t dim) override;
  void embedding_forward_slice(const int32_t* ids, const float* table, float* y, int64_t n,
                               int64_t dim, const VocabRange& range) override;
  void embedding_backward_weight_slice(const int32_t* ids, const float* dy, float* dtable,
                                       int64_t n, int64_t dim, const VocabRange& range) override;

  // ---- attention (cpu_attention.cpp) ------------------------------------------------------
  void attention_forward(const float* qkv, float* out, float* lse, int64_t B, int64_t T, int64_t H,
                         int64_t Dh, float scale) override;
  void attention_backward(const float* qkv, const float* out, const float* dout, const float* lse,
                          float* dqkv, int64_t B, int64_t T, int64_t H, int64_t Dh,
                          float scale) override;

  // ---- reductions and optimizer updates ---------------------------------------------------
  double sum_squares(const float* x, int64_t n) override;
  bool all_finite(const float* x, int64_t n) override;
  void sgd_update(const float* param, const float* grad, float* param_out, float* momentum_buf,
                  int64_t n, const SgdParams& p) override;
  void adamw_update(const float* param, const float* grad, float* param_out, float* m, float* v,
                    int64_t n, const AdamWParams& p) override;

 private:
  // Makes the calling thread's OpenMP pool (which oneDNN uses) num_threads() wide, in case the
  // caller did not bind_current_thread(): results then still depend only on the thread count.
  void ensure_thread_binding() const;

  DeviceId device_;
  int threads_;
  CachingAllocator allocator_;
};

// Device cpu:index, as a Backend. The engine opens CPU devices through the backend registry
// ("cpu", kernels/cpu/cpu_registration.cpp); tests and tools may call this directly.
std::unique_ptr<Backend> make_cpu_backend(int index, int threads);

}  // namespace pt
