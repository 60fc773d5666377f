#pragma once
// Loop helpers shared by the CPU op files (internal to kernels/cpu). Work is split into
// contiguous chunks, one per thread; small work stays on the calling thread because waking the
// OpenMP pool costs more than it saves. Bodies must not throw (exceptions cannot leave an
// OpenMP region): ops validate their inputs before they loop.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace pt::cpu {

// Below this much work (about one element's worth of cheap arithmetic each) a loop is serial.
constexpr int64_t kParallelMin = int64_t{1} << 16;

// Calls body(begin, end) on disjoint chunks covering [0, n). Chunk starts are multiples of
// `grain` (use 16 for element loops so vector loops start aligned, 1 for rows). `work` is the
// total cost in elements, compared against kParallelMin.
template <class Body>
void parallel_chunks(int threads, int64_t n, int64_t work, int64_t grain, Body&& body) {
  if (n <= 0) return;
  if (threads <= 1 || work < kParallelMin || n <= grain) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t nt = omp_get_num_threads();
    const int64_t t = omp_get_thread_num();
    int64_t chunk = (n + nt - 1) / nt;
    chunk = (chunk + grain - 1) / grain * grain;
    const int64_t begin = std::min(n, t * chunk);
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

// An element loop: body(begin, end) over [0, n).
template <class Body>
void parallel_elements(int threads, int64_t n, Body&& body) {
  parallel_chunks(threads, n, n, 16, static_cast<Body&&>(body));
}

// A loop over `rows` independent rows of `cols` elements each: body(row_begin, row_end).
template <class Body>
void parallel_rows(int threads, int64_t rows, int64_t cols, Body&& body) {
  parallel_chunks(threads, rows, rows * cols, 1, static_cast<Body&&>(body));
}

// Column blocks for reductions over rows: each block of columns is summed over all rows in row
// order by one thread, so the result does not depend on the thread count.
constexpr int64_t kColumnBlock = 256;

// body(col_begin, col_end) for each kColumnBlock-wide block of [0, cols), in parallel when
// rows * cols is large.
template <class Body>
void parallel_column_blocks(int threads, int64_t rows, int64_t cols, Body&& body) {
  const int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
  parallel_chunks(threads, blocks, rows * cols, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      body(b * kColumnBlock, std::min(cols, (b + 1) * kColumnBlock));
  });
}

// Sum of x[0, n) in float with 16 partial sums in a fixed order (vectorisable, deterministic).
inline float sum_f32(const float* __restrict x, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += x[i + j];
  float s = 0.f;
  for (int j = 0; j < 16; ++j) s += acc[j];
  for (; i < n; ++i) s += x[i];
  return s;
}

// Fixed-size blocks for whole-array reductions.
constexpr int64_t kReduceBlock = int64_t{1} << 14;

// Sum of f(i) over [0, n) in double: a partial per kReduceBlock block, partials added in block
// order, so the result is the same for any thread count.
template <class F>
double block_sum(int threads, int64_t n, F f) {
  const int64_t blocks = (n + kReduceBlock - 1) / kReduceBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  parallel_chunks(threads, blocks, n, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i0 = b * kReduceBlock, i1 = std::min(n, i0 + kReduceBlock);
      double acc[8] = {};
      int64_t i = i0;
      for (; i + 8 <= i1; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += f(i + j);
      double s = 0.0;
      for (int j = 0; j < 8; ++j) s += acc[j];
      for (; i < i1; ++i) s += f(i);
      partial[static_cast<size_t>(b)] = s;
    }
  });
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace pt::cpu
