// Deterministic reductions (see reduce.h).
//
// Design: a sum is computed by exactly kReduceBlocks blocks of kReduceThreads threads, whatever
// the GPU, so which elements each thread adds, and in which order, depends on n alone: thread t
// of block b adds x[b * kReduceThreads + t + k * kReduceBlocks * kReduceThreads], k = 0, 1, ...
// in order, in double; the block then combines its threads with a shared-memory tree whose
// pairing is fixed, and writes one partial (0 when it had no elements). The host adds the
// kReduceBlocks partials in index order. No atomics and no dependence on scheduling, so the
// result is bit-reproducible (though not the CPU backend's bits: its blocks differ).
// The non-finite check needs no order: any thread that sees inf or NaN makes its block store 1.
#include "kernels/cuda/reduce.h"

#include "kernels/cuda/launch_shape.h"

namespace pt::cuda {

namespace {

constexpr int kReduceThreads = 512;  // 256 blocks x 512 threads: about two blocks per SM
static_assert((kReduceThreads & (kReduceThreads - 1)) == 0, "the tree halves the block");

struct SquareTerm {
  const float* x;
  __device__ double operator()(int64_t i) const {
    const double v = x[i];
    return v * v;
  }
};

struct SquaredDifferenceTerm {
  const float* a;
  const float* b;
  __device__ double operator()(int64_t i) const {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    return d * d;
  }
};

template <class Term>
__global__ void __launch_bounds__(kReduceThreads)
    block_partial_sums_kernel(Term term, int64_t n, double* partials) {
  __shared__ double thread_sums[kReduceThreads];
  const int64_t stride = static_cast<int64_t>(kReduceBlocks) * kReduceThreads;
  int64_t i = static_cast<int64_t>(blockIdx.x) * kReduceThreads + threadIdx.x;
  double acc = 0.0;
  // Four loads in flight per iteration, added in index order: the same sum as the plain loop.
  for (; i + 3 * stride < n; i += 4 * stride) {
    const double t0 = term(i), t1 = term(i + stride), t2 = term(i + 2 * stride),
                 t3 = term(i + 3 * stride);
    acc += t0;
    acc += t1;
    acc += t2;
    acc += t3;
  }
  for (; i < n; i += stride) acc += term(i);
  thread_sums[threadIdx.x] = acc;
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x);
  for (int half = kReduceThreads / 2; half > 0; half /= 2) {
    if (t < half) thread_sums[t] += thread_sums[t + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = thread_sums[0];
}

template <class Term>
cudaError_t launch_partial_sums(Term term, int64_t n, double* partials, cudaStream_t stream) {
  if (n <= 0) return cudaMemsetAsync(partials, 0, kReduceBlocks * sizeof(double), stream);
  block_partial_sums_kernel<<<kReduceBlocks, kReduceThreads, 0, stream>>>(term, n, partials);
  return cudaGetLastError();
}

__global__ void flag_nonfinite_kernel(const float* x, int64_t n, int* flag) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int bad = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    // All exponent bits set: inf or NaN (the CPU backend's test).
    bad |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
  }
  // One store per block that found one; every writer stores the same 1, so the race is benign.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

}  // namespace

cudaError_t launch_sum_squares(const float* x, int64_t n, double* partials, cudaStream_t stream) {
  return launch_partial_sums(SquareTerm{x}, n, partials, stream);
}

cudaError_t launch_sum_squared_difference(const float* a, const float* b, int64_t n,
                                          double* partials, cudaStream_t stream) {
  return launch_partial_sums(SquaredDifferenceTerm{a, b}, n, partials, stream);
}

cudaError_t launch_count_nonfinite(const float* x, int64_t n, int* flag, cudaStream_t stream) {
  // Cleared even for n == 0, so the caller always reads a defined answer.
  if (const cudaError_t e = cudaMemsetAsync(flag, 0, sizeof(int), stream); e != cudaSuccess)
    return e;
  const LaunchShape1d shape = launch_shape_1d(n);
  if (shape.blocks == 0) return cudaSuccess;
  flag_nonfinite_kernel<<<static_cast<unsigned>(shape.blocks), static_cast<unsigned>(shape.threads),
                          0, stream>>>(x, n, flag);
  return cudaGetLastError();
}

}  // namespace pt::cuda
