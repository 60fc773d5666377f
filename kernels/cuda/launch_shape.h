#pragma once
// Launch-shape arithmetic for 1-D elementwise kernels: how many blocks of how many threads cover
// n elements. Plain C++ (no CUDA headers) so that tests/cuda checks it on any host.
//
// Kernels that use it are grid-stride loops (i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
// i += gridDim.x * blockDim.x), so a grid capped at kMaxBlocks still covers every element: each
// thread then handles ceil(n / (blocks * threads)) elements instead of one.
#include <cstdint>

namespace pt::cuda {

struct LaunchShape1d {
  int64_t blocks = 0;      // 0 when n == 0: the caller launches nothing
  int threads = 0;         // threads per block
  int64_t per_thread = 0;  // elements the busiest thread handles in the grid-stride loop
};

inline constexpr int kDefaultThreads = 256;
// Enough resident blocks to fill any current GPU many times over (an H100 has 132 SMs and
// holds at most 8 blocks of 256 threads each); more only adds launch overhead.
inline constexpr int64_t kMaxBlocks = 65535;

// Ceiling division for non-negative a and positive b, without overflow for any int64 a.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// The grid for n elements with `threads` threads per block, capped at max_blocks blocks.
// Preconditions: n >= 0, threads >= 1, max_blocks >= 1.
constexpr LaunchShape1d launch_shape_1d(int64_t n, int threads = kDefaultThreads,
                                        int64_t max_blocks = kMaxBlocks) {
  LaunchShape1d s;
  s.threads = threads;
  if (n <= 0) return s;
  const int64_t wanted = ceil_div(n, threads);
  s.blocks = wanted < max_blocks ? wanted : max_blocks;
  s.per_thread = ceil_div(n, s.blocks * threads);
  return s;
}

}  // namespace pt::cuda
