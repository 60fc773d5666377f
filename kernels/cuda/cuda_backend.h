#pragma once
// The CUDA backend: pt::Backend for one GPU (or one "slot" of it: several stages may share a
// GPU, each with its own streams and memory accounting). Lives inside the plugin, which is built
// from kernels/cuda/ (this backend, its cuBLASLt and cuDNN ops, its kernels) and engine/cuda/
// (the plugin's entries, probe, NCCL); the engine only sees the Backend interface.
//
// Streams: every op, and every copy into or out of this device's memory, is queued on the
// compute stream, so work is ordered as the runtime issued it and a freed block can be reused
// at once (the caching allocator is shared code, engine/core/caching_allocator.h). Copies to
// another GPU run on the copy stream, fenced with events on both sides (copy_to_peer); copies to
// other kinds of devices go through the host (Backend::copy_to).
// Functions that return a host value (losses, norms, checks) synchronise the compute stream.
//
// Arithmetic: GEMMs through cuBLASLt (fp32, tf32, or bf16 operands with fp32 accumulation),
// convolutions through cuDNN, the rest in kernels/cuda/*.cu.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/core/backend.h"
#include "engine/core/caching_allocator.h"

namespace pt::cuda {

class LtGemm;
class CudnnConv;
class CudnnAttention;

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, int slot, Precision precision,
              AttentionKernel attention = AttentionKernel::automatic);
  ~CudaBackend() override;

  DeviceId device() const override { return DeviceId{DeviceKind::cuda, device_}; }
  std::string describe() const override;
  int gpu() const { return device_; }
  cudaStream_t compute_stream() const { return compute_; }

  // ---- memory -----------------------------------------------------------------------------
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  MemoryStats memory_stats() const override;
  void reset_peak() override;
  void set_memory_limit(size_t bytes) override;

  // ---- copies and synchronisation ---------------------------------------------------------
  bool host_accessible() const override { return false; }  // device memory
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy_within(void* dst, const void* src, size_t bytes) override;
  bool copy_to_peer(Backend& dst_backend, void* dst, const void* src, size_t bytes) override;
  std::unique_ptr<Event> record_event() override;
  std::unique_ptr<TimingEvent> record_timing_event() override;  // cudaEvent with timing
  void synchronize() override;

  // ---- threads: one host thread feeds a GPU; binding makes this GPU current ---------------
  void set_num_threads(int) override {}
  int num_threads() const override { return 1; }
  void bind_current_thread() override;

  // ---- ops ----------------------------------------------------------------------------------
  void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
            int64_t ldc) override;
  void gemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                 int64_t lda, const float* B, int64_t ldb, const float* bias, float* C,
                 int64_t ldc) override;
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
  void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                         float* mean, float* rstd, int64_t rows, int64_t cols, float eps) override;
  void layernorm_backward_input(const float* dy, const float* x, const float* gamma,
                                const float* mean, const float* rstd, float* dx, int64_t rows,
                                int64_t cols) override;
  void layernorm_backward_weight(const float* dy, const float* x, const float* mean,
                                 const float* rstd, float* dgamma, float* dbeta, int64_t rows,
                                 int64_t cols) override;
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
  void embedding_forward(const int32_t* ids, const float* table, float* y, int64_t n, int64_t dim,
                         int64_t vocab) override;
  void embedding_backward_weight(const int32_t* ids, const float* dy, float* dtable, int64_t n,
                                 int64_t dim) override;
  void embedding_forward_slice(const int32_t* ids, const float* table, float* y, int64_t n,
                               int64_t dim, const VocabRange& range) override;
  void embedding_backward_weight_slice(const int32_t* ids, const float* dy, float* dtable,
                                       int64_t n, int64_t dim, const VocabRange& range) override;
  void attention_forward(const float* qkv, float* out, float* lse, int64_t B, int64_t T, int64_t H,
                         int64_t Dh, float scale) override;
  void attention_backward(const float* qkv, const float* out, const float* dout, const float* lse,
                          float* dqkv, int64_t B, int64_t T, int64_t H, int64_t Dh,
                          float scale) override;
  double sum_squares(const float* x, int64_t n) override;
  void sum_squares_each(const float* const* xs, const int64_t* ns, size_t count,
                        double* sums) override;
  bool all_finite(const float* x, int64_t n) override;
  void sgd_update(const float* param, const float* grad, float* param_out, float* momentum_buf,
                  int64_t n, const SgdParams& p) override;
  void adamw_update(const float* param, const float* grad, float* param_out, float* m, float* v,
                    int64_t n, const AdamWParams& p) override;

 private:
  // A device buffer that only grows, for scratch used by work on the compute stream (bf16
  // operands, cuDNN workspace, reduction partials). Reusing it for the next op is safe because
  // that op is queued after the previous one on the same stream.
  struct Scratch {
    void* data = nullptr;
    size_t bytes = 0;
  };
  void* scratch(Scratch& s, size_t bytes, const char* purpose);
  // Copies `bytes` of device memory to the host and waits (for results of reductions).
  void read_back(void* host, const void* src, size_t bytes);
  void check(cudaError_t e, const char* call) const;
  // True when this attention call goes to cuDNN (--attention, the precision, the head size);
  // throws UsageError when cuDNN was asked for and the head size cannot be run there.
  bool cudnn_attention_wanted(int64_t Dh) const;
  // After cuDNN refused a shape: an error when cuDNN was asked for, else says why once and
  // turns to the native kernel for the rest of the run.
  void cudnn_attention_refused(const std::exception& e, int64_t B, int64_t T, int64_t H,
                               int64_t Dh);
  CudnnAttention& cudnn_attention();
  // Scratch for the embedding gradients' sort of n positions (embedding.h).
  void* embedding_gradient_scratch(int64_t n);
  void lt_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const float* bias);

  int device_;
  int slot_;
  Precision precision_;
  std::string name_;  // "cuda:0" or "cuda:0 slot 1"
  std::string gpu_name_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<LtGemm> gemm_;
  std::unique_ptr<CudnnConv> conv_;
  AttentionKernel attention_;
  std::unique_ptr<CudnnAttention> cudnn_attention_;  // made on first use
  bool cudnn_attention_off_ = false;  // auto: cuDNN refused once, native from then on
  Scratch gemm_workspace_, operands_, conv_workspace_, partials_;
  Scratch attention_operands_, attention_workspace_;  // bf16 copies; cuDNN's workspace
  Scratch embedding_scratch_;                         // the embedding gradient's sort and runs
  std::mutex copy_mutex_;      // copy_to_peer from several threads shares the copy stream
  bool bias_epilogue_ = true;  // false once cuBLASLt had no algorithm with the bias epilogue
};

}  // namespace pt::cuda
