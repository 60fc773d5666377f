// Losses (see loss.h). Softmax cross-entropy forward is per-row: one block per row (a
// grid-stride loop over rows), sized to the row, reducing the row max and the sum of
// exponentials with warp shuffles and then shared memory in a fixed order, in float as the CPU
// does; the row loss is log(sum) - (x_label - max) in double, exactly the CPU's expression.
// Per-row losses go to a buffer the host adds in row order, and a bad label lowers a row
// index with an integer atomicMin (the minimum does not depend on the order), so the results
// are deterministic. The accuracy count gives each row one warp: a (value, index) arg-max
// reduction where ties go to the lower index reproduces the CPU's first-maximum scan, and
// integer atomics add the counts. The backward passes are elementwise grid-stride loops.
// The vocab-parallel partials reuse the forward's one block per row, with a block-wide
// (value, index) arg-max; their combination is one thread per row, in double and in part
// order, as the CPU loop.
#include "kernels/cuda/loss.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "engine/core/op_params.h"
#include "kernels/cuda/launch_shape.h"

namespace pt::cuda {

namespace {

constexpr int kWarpSize = 32;
constexpr int kMaxRowThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

// Threads for a block that owns one row of `cols` columns: whole warps, no more than needed.
int row_threads(int64_t cols) {
  const int64_t warps =
      std::clamp<int64_t>(ceil_div(cols, kWarpSize), 1, kMaxRowThreads / kWarpSize);
  return static_cast<int>(warps) * kWarpSize;
}

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
// The CPU's comparison; NaN never reaches it (threads start at -inf and skip NaN, see below).
struct MaxOp {
  __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};

template <class Op>
__device__ float warp_reduce(float v, Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// op over v of the whole block, returned to every thread (lane 0 of warp 0 decides it, so all
// threads agree). Every thread must call it (it synchronises); blockDim.x is a multiple of 32.
// Consecutive calls may reuse the shared slots: a call's writes come after the previous call's
// last barrier, which every thread passes only after it has read the previous result.
template <class Op>
__device__ float block_reduce(float v, Op op, float identity) {
  __shared__ float warp_results[kMaxRowThreads / kWarpSize];
  __shared__ float result;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  v = warp_reduce(v, op);
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < warps ? warp_results[lane] : identity;
    w = warp_reduce(w, op);
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}

__global__ void set_int_kernel(int* target, int value) { *target = value; }

__global__ void softmax_xent_forward_kernel(
    const float* __restrict__ logits, const int32_t* __restrict__ labels, float* __restrict__ probs,
    double* __restrict__ row_loss, int* __restrict__ first_bad_row, int64_t rows, int64_t classes) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = logits + r * classes;
    float* pr = probs + r * classes;
    // A NaN logit makes the sum, every probability and the loss NaN whatever the max, as on
    // the CPU; -inf start and the strict comparison keep NaN out of the max itself.
    float part_max = -INFINITY;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
      part_max = xr[c] > part_max ? xr[c] : part_max;
    const float mx = block_reduce(part_max, MaxOp{}, -INFINITY);
    float part_sum = 0.f;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
      const float e = expf(xr[c] - mx);
      pr[c] = e;  // rescaled below by the same thread, so no barrier is needed
      part_sum += e;
    }
    const float sum = block_reduce(part_sum, SumOp{}, 0.f);
    const float inv = 1.f / sum;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) pr[c] *= inv;
    if (threadIdx.x == 0) {
      const int32_t label = labels[r];
      if (label < 0 || label >= classes) {
        row_loss[r] = 0.0;
        atomicMin(first_bad_row, static_cast<int>(r));
      } else {
        row_loss[r] = log(static_cast<double>(sum)) - static_cast<double>(xr[label] - mx);
      }
    }
  }
}

// dlogits may be probs (in place): each element is read, then written, by the same thread.
__global__ void softmax_xent_backward_kernel(const float* probs, const int32_t* __restrict__ labels,
                                             float* dlogits, int64_t rows, int64_t classes,
                                             float scale) {
  const int64_t n = rows * classes;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t r = i / classes, c = i - r * classes;
    const float p = probs[i];
    dlogits[i] = c == labels[r] ? scale * (p - 1.f) : scale * p;
  }
}

__global__ void mse_backward_kernel(const float* __restrict__ pred,
                                    const float* __restrict__ target, float* __restrict__ dpred,
                                    int64_t n, float k) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dpred[i] = k * (pred[i] - target[i]);
}

constexpr int64_t kNoCandidate = INT64_MAX;

// Whether (v, at) beats (best, best_at): larger, or equal and earlier.
__device__ bool beats(float v, int64_t at, float best, int64_t best_at) {
  return v > best || (v == best && at < best_at);
}

// One warp per row. The CPU scan (best = 0; best = c if x[c] > x[best]) picks index 0 when
// x[0] is NaN, and otherwise the first maximum of the non-NaN values (a NaN never compares
// greater). NaNs are skipped below and x[0] = NaN is decided separately, which reproduces it.
__global__ void count_correct_kernel(const float* __restrict__ logits,
                                     const int32_t* __restrict__ labels, int64_t rows,
                                     int64_t classes, unsigned long long* count) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int64_t warps_per_block = blockDim.x / kWarpSize;
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * warps_per_block;
  unsigned long long correct = 0;
  for (int64_t r = blockIdx.x * warps_per_block + threadIdx.x / kWarpSize; r < rows;
       r += warp_stride) {
    const float* xr = logits + r * classes;
    float best = -INFINITY;
    int64_t best_at = kNoCandidate;  // loses every tie, so a real -inf still wins
    for (int64_t c = lane; c < classes; c += kWarpSize) {
      const float v = xr[c];
      if (beats(v, c, best, best_at)) {  // false for NaN
        best = v;
        best_at = c;
      }
    }
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
      const float other = __shfl_xor_sync(kFullMask, best, offset);
      const long long other_at =
          __shfl_xor_sync(kFullMask, static_cast<long long>(best_at), offset);
      if (beats(other, other_at, best, best_at)) {
        best = other;
        best_at = other_at;
      }
    }
    if (lane == 0) {
      if (isnan(xr[0])) best_at = 0;
      correct += best_at == labels[r] ? 1 : 0;
    }
  }
  if (lane == 0 && correct != 0) atomicAdd(count, correct);
}

// ---- vocab-parallel softmax cross-entropy ----------------------------------------------------

// A first maximum: the largest value, on equal values the lowest index. kNoCandidate (with
// -inf) loses to any real candidate, which every thread's strict scan makes only of values
// above -inf, as the CPU's scan does.
struct ArgMax {
  float v;
  int64_t at;
};

__device__ ArgMax warp_argmax(ArgMax m) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(kFullMask, m.v, offset);
    const long long at = __shfl_xor_sync(kFullMask, static_cast<long long>(m.at), offset);
    if (beats(v, at, m.v, m.at)) m = ArgMax{v, static_cast<int64_t>(at)};
  }
  return m;
}

// The block's first maximum, returned to every thread (block_reduce's pattern and its rule on
// reusing the shared slots).
__device__ ArgMax block_argmax(ArgMax m) {
  __shared__ float warp_v[kMaxRowThreads / kWarpSize];
  __shared__ int64_t warp_at[kMaxRowThreads / kWarpSize];
  __shared__ float result_v;
  __shared__ int64_t result_at;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  m = warp_argmax(m);
  if (lane == 0) {
    warp_v[warp] = m.v;
    warp_at[warp] = m.at;
  }
  __syncthreads();
  if (warp == 0) {
    ArgMax w = lane < warps ? ArgMax{warp_v[lane], warp_at[lane]} : ArgMax{-INFINITY, kNoCandidate};
    w = warp_argmax(w);
    if (lane == 0) {
      result_v = w.v;
      result_at = w.at;
    }
  }
  __syncthreads();
  return ArgMax{result_v, result_at};
}

__global__ void softmax_partials_kernel(const float* __restrict__ logits,
                                        const int32_t* __restrict__ labels,
                                        float* __restrict__ partials,
                                        int* __restrict__ first_bad_row, int64_t rows,
                                        int64_t first, int64_t count, int64_t total) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = logits + r * count;
    ArgMax mine{-INFINITY, kNoCandidate};
    for (int64_t c = threadIdx.x; c < count; c += blockDim.x)
      if (xr[c] > mine.v) mine = ArgMax{xr[c], c};  // false for NaN, as on the CPU
    const ArgMax best = block_argmax(mine);
    // No number in the slice: a sum of 0, not exp(-inf - -inf) = NaN (op_params.h).
    float part_sum = 0.f;
    if (best.v != -INFINITY)
      for (int64_t c = threadIdx.x; c < count; c += blockDim.x) part_sum += expf(xr[c] - best.v);
    const float sum = block_reduce(part_sum, SumOp{}, 0.f);
    if (threadIdx.x == 0) {
      const int32_t label = labels[r];
      if (label < 0 || label >= total) atomicMin(first_bad_row, static_cast<int>(r));
      const int64_t local = static_cast<int64_t>(label) - first;
      float* out = partials + r * kSoftmaxPartialFloats;
      out[0] = best.v;
      out[1] = sum;
      out[2] = local >= 0 && local < count ? xr[local] : 0.f;
      out[3] = static_cast<float>(first + (best.at == kNoCandidate ? 0 : best.at));
    }
  }
}

__global__ void softmax_combine_kernel(const float* __restrict__ partials,
                                       const int32_t* __restrict__ labels, float* __restrict__ norm,
                                       double* __restrict__ row_loss,
                                       unsigned long long* __restrict__ correct, int64_t parts,
                                       int64_t rows) {
  const int64_t stride_rows = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t part_stride = rows * kSoftmaxPartialFloats;
  unsigned long long mine = 0;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += stride_rows) {
    const float* row = partials + r * kSoftmaxPartialFloats;
    float mx = row[0], best = row[0], best_at = row[3], label_z = row[2];
    for (int64_t p = 1; p < parts; ++p) {
      const float* part = row + p * part_stride;
      mx = part[0] > mx ? part[0] : mx;
      if (part[0] > best) {
        best = part[0];
        best_at = part[3];
      }
      label_z += part[2];
    }
    double sum = 0.0;
    for (int64_t p = 0; p < parts; ++p) {
      const float* part = row + p * part_stride;
      sum += static_cast<double>(part[1]) *
             exp(static_cast<double>(part[0]) - static_cast<double>(mx));
    }
    if (norm) {
      norm[2 * r] = mx;
      norm[2 * r + 1] = static_cast<float>(sum);
    }
    row_loss[r] = log(sum) - static_cast<double>(label_z - mx);
    mine += static_cast<int64_t>(best_at) == labels[r] ? 1 : 0;
  }
  if (mine != 0) atomicAdd(correct, mine);
}

__global__ void softmax_xent_backward_slice_kernel(const float* __restrict__ logits,
                                                   const int32_t* __restrict__ labels,
                                                   const float* __restrict__ norm,
                                                   float* __restrict__ dlogits, int64_t rows,
                                                   int64_t first, int64_t count, float scale) {
  const int64_t n = rows * count;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t r = i / count, c = i - r * count;
    const float p = expf(logits[i] - norm[2 * r]) * (1.f / norm[2 * r + 1]);  // the CPU's order
    dlogits[i] = c == static_cast<int64_t>(labels[r]) - first ? scale * (p - 1.f) : scale * p;
  }
}

}  // namespace

cudaError_t launch_softmax_xent_forward(const float* logits, const int32_t* labels, float* probs,
                                        double* row_loss, int* first_bad_row, int64_t rows,
                                        int64_t classes, cudaStream_t stream) {
  if (rows < 0 || rows > INT_MAX) return cudaErrorInvalidValue;
  set_int_kernel<<<1, 1, 0, stream>>>(first_bad_row, static_cast<int>(rows));
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  if (rows == 0) return cudaSuccess;
  // classes == 0 still runs: every label is then out of range and row 0 is reported.
  softmax_xent_forward_kernel<<<static_cast<unsigned>(std::min(rows, kMaxBlocks)),
                                static_cast<unsigned>(row_threads(classes)), 0, stream>>>(
      logits, labels, probs, row_loss, first_bad_row, rows, classes);
  return cudaGetLastError();
}

cudaError_t launch_softmax_xent_backward(const float* probs, const int32_t* labels, float* dlogits,
                                         int64_t rows, int64_t classes, float scale,
                                         cudaStream_t stream) {
  if (rows <= 0 || classes <= 0) return cudaSuccess;
  const LaunchShape1d shape = launch_shape_1d(rows * classes);
  softmax_xent_backward_kernel<<<static_cast<unsigned>(shape.blocks),
                                 static_cast<unsigned>(shape.threads), 0, stream>>>(
      probs, labels, dlogits, rows, classes, scale);
  return cudaGetLastError();
}

cudaError_t launch_mse_backward(const float* pred, const float* target, float* dpred, int64_t n,
                                float scale, cudaStream_t stream) {
  const LaunchShape1d shape = launch_shape_1d(n);
  if (shape.blocks == 0) return cudaSuccess;
  // 2 * scale rounded once, as the CPU does, so both give the same bits.
  mse_backward_kernel<<<static_cast<unsigned>(shape.blocks), static_cast<unsigned>(shape.threads),
                        0, stream>>>(pred, target, dpred, n, 2.f * scale);
  return cudaGetLastError();
}

cudaError_t launch_count_correct(const float* logits, const int32_t* labels, int64_t rows,
                                 int64_t classes, unsigned long long* count, cudaStream_t stream) {
  if (const cudaError_t err = cudaMemsetAsync(count, 0, sizeof(*count), stream); err != cudaSuccess)
    return err;
  if (rows <= 0 || classes <= 0) return cudaSuccess;  // the CPU counts nothing without classes
  constexpr int kThreads = 256;
  const int64_t blocks = std::min(ceil_div(rows, kThreads / kWarpSize), kMaxBlocks);
  count_correct_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(logits, labels, rows,
                                                                               classes, count);
  return cudaGetLastError();
}

cudaError_t launch_softmax_partials(const float* logits, const int32_t* labels, float* partials,
                                    int* first_bad_row, int64_t rows, int64_t first, int64_t count,
                                    int64_t total, cudaStream_t stream) {
  if (rows < 0 || rows > INT_MAX) return cudaErrorInvalidValue;
  set_int_kernel<<<1, 1, 0, stream>>>(first_bad_row, static_cast<int>(rows));
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  if (rows == 0) return cudaSuccess;
  softmax_partials_kernel<<<static_cast<unsigned>(std::min(rows, kMaxBlocks)),
                            static_cast<unsigned>(row_threads(count)), 0, stream>>>(
      logits, labels, partials, first_bad_row, rows, first, count, total);
  return cudaGetLastError();
}

cudaError_t launch_softmax_combine(const float* partials, const int32_t* labels, float* norm,
                                   double* row_loss, unsigned long long* correct, int64_t parts,
                                   int64_t rows, cudaStream_t stream) {
  if (const cudaError_t err = cudaMemsetAsync(correct, 0, sizeof(*correct), stream);
      err != cudaSuccess)
    return err;
  const LaunchShape1d shape = launch_shape_1d(rows);
  if (shape.blocks == 0 || parts <= 0) return cudaSuccess;
  softmax_combine_kernel<<<static_cast<unsigned>(shape.blocks),
                           static_cast<unsigned>(shape.threads), 0, stream>>>(
      partials, labels, norm, row_loss, correct, parts, rows);
  return cudaGetLastError();
}

cudaError_t launch_softmax_xent_backward_slice(const float* logits, const int32_t* labels,
                                               const float* norm, float* dlogits, int64_t rows,
                                               int64_t first, int64_t count, float scale,
                                               cudaStream_t stream) {
  if (rows <= 0 || count <= 0) return cudaSuccess;
  const LaunchShape1d shape = launch_shape_1d(rows * count);
  softmax_xent_backward_slice_kernel<<<static_cast<unsigned>(shape.blocks),
                                       static_cast<unsigned>(shape.threads), 0, stream>>>(
      logits, labels, norm, dlogits, rows, first, count, scale);
  return cudaGetLastError();
}

}  // namespace pt::cuda
