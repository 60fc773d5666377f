#pragma once
// The Backend interface: one object per device. Memory with per-device accounting, copies,
// synchronisation, and the ops the layers are written against. The CPU and CUDA backends, side by
// side under kernels/ (the CUDA one inside a dlopen'ed plugin), implement it; layers never know
// which, and the engine asks a backend what it can do (host_accessible()), never which kind it
// is. Backends are opened by kind name through engine/core/backend_registry.h. The ops'
// parameter types are in engine/core/op_params.h.
//
// Conventions for every op (llm.c style):
// - pointers are device pointers of this backend; shapes are in the signature, row-major;
// - f32 unless the type says otherwise; labels and ids are int32;
// - functions named *_accumulate, and every parameter-gradient output, ADD into their output
//   (dW += ...), so micro-batches accumulate; everything else overwrites its output;
// - ops may be asynchronous on a device backend: call synchronize() before reading results on
//   the host (functions that return a host value synchronise themselves).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/device.h"
#include "engine/core/op_params.h"
#include "engine/core/tensor.h"

namespace pt {

struct MemoryStats {
  size_t current_bytes = 0;   // live allocations
  size_t peak_bytes = 0;      // high-water mark since the last reset_peak()
  size_t limit_bytes = 0;     // 0 = unlimited
  size_t reserved_bytes = 0;  // held from the system: live blocks' capacity plus the cache
};

// Completion marker for work queued on a backend (a CUDA event; already complete on the CPU).
class Event {
 public:
  virtual ~Event() = default;
  virtual void synchronize() = 0;
};

// A point in a backend's work queue whose time can be read later, without waiting for the work
// when it is recorded (a CUDA event with timing; on a backend whose ops complete before they
// return, the host clock). For per-action traces: a synchronisation after each action would
// serialise a GPU's streams, which are meant to overlap.
class TimingEvent {
 public:
  virtual ~TimingEvent() = default;
  // Seconds of device time from `earlier` (recorded before it on the same backend) to this event;
  // waits until this event has completed.
  virtual double seconds_since(TimingEvent& earlier) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual DeviceId device() const = 0;
  virtual std::string describe() const = 0;  // one line: "cpu:0 (1 thread, oneDNN 2.6.3)"

  // ---- memory -----------------------------------------------------------------------------
  // Throws OutOfMemory naming the device, the request, current and limit bytes.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak() = 0;
  virtual void set_memory_limit(size_t bytes) = 0;  // 0 = unlimited

  // An uninitialised tensor in this backend's memory (owning).
  Tensor empty(const Shape& shape, DType dtype = DType::f32);
  // A tensor filled with zeros.
  Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  // A copy of `src` (in this backend's memory) in `dst`'s memory. Ordered before any work queued
  // afterwards on either backend (CPU: complete when it returns; CUDA: fenced on both streams,
  // so the calling thread does not wait for the GPU). Read it on the host through dst.
  Tensor copy_to(Backend& dst, const Tensor& src);
  // Copies `bytes` from `src` (this backend's memory) to `dst` (`dst_backend`'s memory), between
  // any two backends, with the ordering of copy_to above. The peer copy when this backend can
  // reach dst_backend (copy_to_peer); otherwise through the host: straight into or out of the
  // memory of a host_accessible() side, or through a host buffer when neither side is.
  void copy_to(Backend& dst_backend, void* dst, const void* src, size_t bytes);

  // ---- copies and synchronisation ---------------------------------------------------------
  // True when the host may read and write this backend's memory directly (through the pointers
  // it hands out), once synchronize() has returned: the CPU backend's, not a GPU's. The engine
  // asks this, never the device's kind, to decide whether data must be staged through the host
  // (e.g. for a communicator that only takes host memory).
  virtual bool host_accessible() const = 0;
  // Ordered after the work queued on this device; the caller may reuse host_src as soon as it
  // returns (the bytes may still be on their way to the device).
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  // Ordered after the work queued on this device; the bytes are in host_dst when it returns.
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy_within(void* dst, const void* src, size_t bytes) = 0;
  // The peer copy: into the memory of another backend of this backend's own kind (CPU: memcpy;
  // CUDA: peer copy on the copy stream, ordered after the work queued so far on both devices and
  // before what they queue next). Returns false, having copied nothing, when this backend cannot
  // reach dst_backend's memory itself (another kind of backend; GPUs without peer access):
  // copy_to then stages through the host. Call copy_to, which never fails that way.
  virtual bool copy_to_peer(Backend& dst_backend, void* dst, const void* src, size_t bytes) = 0;
  virtual std::unique_ptr<Event> record_event() = 0;
  virtual void synchronize() = 0;
  // Marks the work queued so far, for timing (TimingEvent above). The default synchronises and
  // reads the host clock: right for the CPU, whose synchronize() returns at once; a backend with
  // a queue of its own overrides it with its events.
  virtual std::unique_ptr<TimingEvent> record_timing_event();

  // ---- threads ----------------------------------------------------------------------------
  // The number of threads this device's ops use. bind_current_thread() must be called on each
  // thread that issues ops to this device (it sets that thread's OpenMP pool size), so two
  // devices on two cores compute in parallel without oversubscription.
  virtual void set_num_threads(int threads) = 0;
  virtual int num_threads() const = 0;
  virtual void bind_current_thread() = 0;
  // Whether this device computes on the host's CPU cores (the CPU backend: cpu:0..N-1 are thread
  // pools sharing them), so several such devices can be merged into one with all their threads:
  // --plan auto weighs that against stages and replicas.
  virtual bool computes_on_host_cores() const { return false; }

  // ---- GEMM -------------------------------------------------------------------------------
  // C(M,N) = alpha * op(A)(M,K) * op(B)(K,N) + beta * C. Row-major; op(X) = X^T when trans_x.
  // lda/ldb/ldc are the row strides of A, B, C as stored.
  virtual void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                    int64_t ldc) = 0;

  // C(M,N) = op(A) op(B) + bias(N) broadcast over rows: the forward of a Linear layer. Devices
  // with a fused epilogue (cuBLASLt) add the bias inside the GEMM; the default is gemm followed
  // by add_bias (the same bits as calling them in turn).
  virtual void gemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                         const float* A, int64_t lda, const float* B, int64_t ldb,
                         const float* bias, float* C, int64_t ldc) {
    gemm(trans_a, trans_b, M, N, K, 1.f, A, lda, B, ldb, 0.f, C, ldc);
    if (ldc == N) {
      add_bias(C, bias, M, N);
      return;
    }
    for (int64_t r = 0; r < M; ++r) add_bias(C + r * ldc, bias, 1, N);  // rows with padding
  }

  // ---- elementwise ------------------------------------------------------------------------
  virtual void fill(float* x, float value, int64_t n) = 0;
  virtual void add(const float* a, const float* b, float* y, int64_t n) = 0;  // y = a + b
  virtual void axpy(float alpha, const float* x, float* y, int64_t n) = 0;    // y += alpha x
  virtual void scale(float alpha, float* x, int64_t n) = 0;                   // x *= alpha
  // y(rows, cols) += bias(cols) broadcast over rows.
  virtual void add_bias(float* y, const float* bias, int64_t rows, int64_t cols) = 0;
  // out(cols) += sum over rows of x(rows, cols)   (the bias gradient of a Linear layer).
  virtual void sum_rows_accumulate(const float* x, float* out, int64_t rows, int64_t cols) = 0;
  // y = f(x).
  virtual void activation_forward(Activation f, const float* x, float* y, int64_t n) = 0;
  // dx = f'(x) * dy. ReLU and GELU read x; Tanh reads y (= tanh(x)); pass both.
  virtual void activation_backward(Activation f, const float* x, const float* y, const float* dy,
                                   float* dx, int64_t n) = 0;
  // Inverted dropout: element i is kept iff uniform(key, i) >= p; kept elements scale by
  // 1/(1-p). The mask is a pure function of (key, i), so backward recomputes it.
  virtual void dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t key) = 0;
  virtual void dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t key) = 0;

  // ---- normalisation ----------------------------------------------------------------------
  // Over the last dimension of x(rows, cols); mean/rstd (rows) are saved for backward.
  virtual void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                                 float* mean, float* rstd, int64_t rows, int64_t cols,
                                 float eps) = 0;
  virtual void layernorm_backward_input(const float* dy, const float* x, const float* gamma,
                                        const float* mean, const float* rstd, float* dx,
                                        int64_t rows, int64_t cols) = 0;
  // dgamma += sum_r dy * xhat; dbeta += sum_r dy.
  virtual void layernorm_backward_weight(const float* dy, const float* x, const float* mean,
                                         const float* rstd, float* dgamma, float* dbeta,
                                         int64_t rows, int64_t cols) = 0;

  // ---- losses -----------------------------------------------------------------------------
  // probs = softmax(logits) per row; returns sum over rows of -log probs[label] (host value).
  // Throws UsageError if a label is outside [0, classes).
  virtual double softmax_xent_forward(const float* logits, const int32_t* labels, float* probs,
                                      int64_t rows, int64_t classes) = 0;
  // dlogits = scale * (probs - onehot(labels)); dlogits may be probs itself (in place: the loss
  // layer writes the gradient over the saved probabilities, one vocabulary-sized buffer less).
  virtual void softmax_xent_backward(const float* probs, const int32_t* labels, float* dlogits,
                                     int64_t rows, int64_t classes, float scale) = 0;
  // Returns sum of (pred - target)^2 (host value).
  virtual double mse_forward(const float* pred, const float* target, int64_t n) = 0;
  // dpred = scale * 2 (pred - target).
  virtual void mse_backward(const float* pred, const float* target, float* dpred, int64_t n,
                            float scale) = 0;
  // Number of rows whose arg-max equals the label (host value; first maximum wins).
  virtual int64_t count_correct(const float* logits, const int32_t* labels, int64_t rows,
                                int64_t classes) = 0;

  // The same loss over logits split by classes across tensor-parallel ranks (Megatron-LM's
  // vocab-parallel cross-entropy), in three steps around one all-gather of the partials:
  // softmax_partials on each rank's slice, softmax_combine of every rank's partials (the same
  // bits on every rank), softmax_xent_backward_slice on each rank's slice.
  //
  // partials(rows, kSoftmaxPartialFloats) = the statistics of logits(rows, range.count), the
  // classes [range.first, range.first + range.count) of each row (op_params.h says what they
  // are). labels(rows) are global classes. Throws UsageError if a label is outside
  // [0, range.total) or range.total > kSoftmaxMaxIndex.
  virtual void softmax_partials(const float* logits, const int32_t* labels, float* partials,
                                int64_t rows, const VocabRange& range) = 0;
  // partials(parts, rows, kSoftmaxPartialFloats), part p the partials of the p-th slice of the
  // classes (the all-gather's layout). For each row, with m_p, s_p, z_p part p's max, sum_exp
  // and label_z: M = max_p m_p, S = sum_p s_p exp(m_p - M) (in double, in part order);
  // norm(rows, 2) = (M, S) as floats unless norm is null (overwrites). Returns the sum over rows
  // of log S - (sum_p z_p - M) = -log softmax(z)[label], and the number of rows whose arg-max
  // (on equal maxima the earlier part's: the lowest class) is the label (host values).
  virtual SoftmaxTotals softmax_combine(const float* partials, const int32_t* labels, float* norm,
                                        int64_t parts, int64_t rows) = 0;
  // dlogits(rows, range.count) = scale * (exp(z - M) / S - onehot(labels)) on the slice,
  // with norm(rows, 2) = (M, S) from softmax_combine; a label outside the slice adds no one-hot.
  virtual void softmax_xent_backward_slice(const float* logits, const int32_t* labels,
                                           const float* norm, float* dlogits, int64_t rows,
                                           const VocabRange& range, float scale) = 0;

  // ---- convolution and pooling (NCHW) -----------------------------------------------------
  virtual void conv2d_forward(const Conv2dShape& s, const float* x, const float* w,
                              const float* bias /* nullable */, float* y) = 0;
  virtual void conv2d_backward_input(const Conv2dShape& s, const float* dy, const float* w,
                                     float* dx) = 0;
  // dw += ..., dbias += ... (dbias nullable).
  virtual void conv2d_backward_weight(const Conv2dShape& s, const float* dy, const float* x,
                                      float* dw, float* dbias) = 0;
  // argmax (N, C, P, Q) holds the flat index h*W + w of each window's maximum (first wins).
  virtual void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y,
                                 int32_t* argmax) = 0;
  virtual void maxpool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax,
                                  float* dx) = 0;
  virtual void avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) = 0;
  virtual void avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) = 0;

  // ---- embedding --------------------------------------------------------------------------
  // y(n, dim) = table[ids[i]]; throws UsageError for an id outside [0, vocab).
  virtual void embedding_forward(const int32_t* ids, const float* table, float* y, int64_t n,
                                 int64_t dim, int64_t vocab) = 0;
  // dtable[ids[i]] += dy(i).
  virtual void embedding_backward_weight(const int32_t* ids, const float* dy, float* dtable,
                                         int64_t n, int64_t dim) = 0;
  // The same on the rows [range.first, range.first + range.count) of a table of range.total
  // rows that one tensor-parallel rank holds (a vocab-parallel embedding): table(range.count,
  // dim) holds them. y(n, dim) = table[ids[i] - range.first] for an id in the slice, zeros for
  // the others (summed over the ranks, every row is the whole table's); throws UsageError for
  // an id outside [0, range.total).
  virtual void embedding_forward_slice(const int32_t* ids, const float* table, float* y, int64_t n,
                                       int64_t dim, const VocabRange& range) = 0;
  // dtable[ids[i] - range.first] += dy(i) for the ids in the slice; the others add nothing.
  virtual void embedding_backward_weight_slice(const int32_t* ids, const float* dy, float* dtable,
                                               int64_t n, int64_t dim, const VocabRange& range) = 0;

  // ---- attention --------------------------------------------------------------------------
  // Causal multi-head self-attention on the output of one fused QKV projection:
  //   qkv (B, T, 3, H, Dh) -> out (B, T, H, Dh),  lse (B, H, T)
  //   out[b,t,h] = sum_{s<=t} softmax_s(scale q[b,t,h] . k[b,s,h]) v[b,s,h]
  //   lse[b,h,t] = log sum_{s<=t} exp(scale q . k)   (saved so backward recomputes the softmax)
  // T is the actual sequence length of this call (any T >= 1). Memory-efficient: no (T, T)
  // matrix per head is stored.
  virtual void attention_forward(const float* qkv, float* out, float* lse, int64_t B, int64_t T,
                                 int64_t H, int64_t Dh, float scale) = 0;
  // dqkv (B, T, 3, H, Dh) = d(out)/d(qkv) applied to dout (B, T, H, Dh); overwrites dqkv.
  // out and lse are forward's outputs for the same qkv.
  virtual void attention_backward(const float* qkv, const float* out, const float* dout,
                                  const float* lse, float* dqkv, int64_t B, int64_t T, int64_t H,
                                  int64_t Dh, float scale) = 0;

  // ---- reductions and optimizer updates ---------------------------------------------------
  virtual double sum_squares(const float* x, int64_t n) = 0;  // host value, double accumulation
  // sums[k] = sum_squares(xs[k], ns[k]) for k < count, the same bits, with one wait for the
  // device instead of one per tensor (the gradient norm reads every tensor's sum at once).
  virtual void sum_squares_each(const float* const* xs, const int64_t* ns, size_t count,
                                double* sums) {
    for (size_t k = 0; k < count; ++k) sums[k] = sum_squares(xs[k], ns[k]);
  }
  virtual bool all_finite(const float* x, int64_t n) = 0;  // host value
  // param_out = param updated by grad (and the state): param_out is param itself (in place) or
  // a buffer that does not overlap it (PipeDream-2BW writes the new version over the stash
  // instead of copying the latest there first); anything between is a UsageError.
  // momentum_buf may be null when momentum == 0.
  virtual void sgd_update(const float* param, const float* grad, float* param_out,
                          float* momentum_buf, int64_t n, const SgdParams& p) = 0;
  virtual void adamw_update(const float* param, const float* grad, float* param_out, float* m,
                            float* v, int64_t n, const AdamWParams& p) = 0;
};

// The optimizer updates' buffer contract (above), for every backend to check the same way:
// throws UsageError naming `op` when param_out overlaps param without being it.
void require_in_place_or_disjoint(const char* op, const float* param, const float* param_out,
                                  int64_t n);

}  // namespace pt
