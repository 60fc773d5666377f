// Layer normalisation (see norm.h). Forward and the input gradient are per-row: one block per
// row (a grid-stride loop over rows), sized to the row (one warp for rows of up to 32 columns,
// at most kMaxRowThreads threads), each thread taking a strided share of the columns and the
// block reducing the row sums with warp shuffles and then shared memory. Sums are float, as on
// the CPU, and reduce in an order fixed by (cols), so results do not change from run to run.
// The weight gradient sums over rows instead: each block owns a tile of 32 columns (a warp
// reads 32 adjacent floats of a row, coalesced) and kWeightRowGroups row groups each add every
// kWeightRowGroups-th row in order; the groups' partials are then added in group order. No
// atomics, so dgamma/dbeta are deterministic too.
#include "kernels/cuda/norm.h"

#include <algorithm>

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

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min(rows, kMaxBlocks)); }

// XOR butterfly: every lane ends with the same sum, since a + b == b + a exactly.
__device__ float warp_sum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// Sum of v over the block, returned to every thread. Every thread of the block must call it
// (it synchronises); blockDim.x is a multiple of 32. Consecutive calls may reuse the shared
// slots: a call's writes come after the previous call's last barrier, which every thread
// passes only after it has read the previous result.
__device__ float block_sum(float v) {
  __shared__ float warp_sums[kMaxRowThreads / kWarpSize];
  __shared__ float total;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < warps ? warp_sums[lane] : 0.f;
    w = warp_sum(w);
    if (lane == 0) total = w;
  }
  __syncthreads();
  return total;
}

__global__ void layernorm_forward_kernel(const float* __restrict__ x,
                                         const float* __restrict__ gamma,
                                         const float* __restrict__ beta, float* __restrict__ y,
                                         float* __restrict__ mean, float* __restrict__ rstd,
                                         int64_t rows, int64_t cols, float eps) {
  const float inv_cols = 1.f / static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float part = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) part += xr[c];
    const float mu = block_sum(part) * inv_cols;
    // Two passes, as on the CPU: the variance of (x - mu) does not cancel catastrophically.
    float sq = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float d = xr[c] - mu;
      sq += d * d;
    }
    const float rs = 1.f / sqrtf(block_sum(sq) * inv_cols + eps);
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      yr[c] = (xr[c] - mu) * rs * gamma[c] + beta[c];
  }
}

__global__ void layernorm_backward_input_kernel(
    const float* __restrict__ dy, const float* __restrict__ x, const float* __restrict__ gamma,
    const float* __restrict__ mean, const float* __restrict__ rstd, float* __restrict__ dx,
    int64_t rows, int64_t cols) {
  const float inv_cols = 1.f / static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    float* dxr = dx + r * cols;
    const float mu = mean[r], rs = rstd[r];
    float part_g = 0.f, part_gx = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float g = dyr[c] * gamma[c];
      part_g += g;
      part_gx += g * ((xr[c] - mu) * rs);
    }
    const float mean_g = block_sum(part_g) * inv_cols;
    const float mean_gx = block_sum(part_gx) * inv_cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float xhat = (xr[c] - mu) * rs;
      dxr[c] = rs * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
    }
  }
}

constexpr int kWeightTileCols = kWarpSize;  // one warp reads one row of the tile
constexpr int kWeightRowGroups = 32;        // rows split among this many threads per column

__global__
__launch_bounds__(kWeightTileCols* kWeightRowGroups) void layernorm_backward_weight_kernel(
    const float* __restrict__ dy, const float* __restrict__ x, const float* __restrict__ mean,
    const float* __restrict__ rstd, float* __restrict__ dgamma, float* __restrict__ dbeta,
    int64_t rows, int64_t cols, int64_t tiles /* ceil(cols / kWeightTileCols), a host helper */) {
  __shared__ float group_g[kWeightRowGroups][kWeightTileCols];
  __shared__ float group_b[kWeightRowGroups][kWeightTileCols];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t c = tile * kWeightTileCols + tx;
    float acc_g = 0.f, acc_b = 0.f;
    if (c < cols) {
      for (int64_t r = ty; r < rows; r += kWeightRowGroups) {
        const float d = dy[r * cols + c];
        acc_g += d * ((x[r * cols + c] - mean[r]) * rstd[r]);
        acc_b += d;
      }
    }
    group_g[ty][tx] = acc_g;
    group_b[ty][tx] = acc_b;
    __syncthreads();
    if (ty == 0 && c < cols) {
      float g = 0.f, b = 0.f;
      for (int k = 0; k < kWeightRowGroups; ++k) {
        g += group_g[k][tx];
        b += group_b[k][tx];
      }
      dgamma[c] += g;
      dbeta[c] += b;
    }
    __syncthreads();  // the next tile overwrites group_g/group_b
  }
}

}  // namespace

cudaError_t launch_layernorm_forward(const float* x, const float* gamma, const float* beta,
                                     float* y, float* mean, float* rstd, int64_t rows, int64_t cols,
                                     float eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  layernorm_forward_kernel<<<row_blocks(rows), static_cast<unsigned>(row_threads(cols)), 0,
                             stream>>>(x, gamma, beta, y, mean, rstd, rows, cols, eps);
  return cudaGetLastError();
}

cudaError_t launch_layernorm_backward_input(const float* dy, const float* x, const float* gamma,
                                            const float* mean, const float* rstd, float* dx,
                                            int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  layernorm_backward_input_kernel<<<row_blocks(rows), static_cast<unsigned>(row_threads(cols)), 0,
                                    stream>>>(dy, x, gamma, mean, rstd, dx, rows, cols);
  return cudaGetLastError();
}

cudaError_t launch_layernorm_backward_weight(const float* dy, const float* x, const float* mean,
                                             const float* rstd, float* dgamma, float* dbeta,
                                             int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int64_t tiles = ceil_div(cols, kWeightTileCols);
  const dim3 block(kWeightTileCols, kWeightRowGroups);
  layernorm_backward_weight_kernel<<<static_cast<unsigned>(std::min(tiles, kMaxBlocks)), block, 0,
                                     stream>>>(dy, x, mean, rstd, dgamma, dbeta, rows, cols, tiles);
  return cudaGetLastError();
}

}  // namespace pt::cuda
