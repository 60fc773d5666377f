// Causal multi-head self-attention (see attention.h): a first, simple GPU version.
//
// Design. One warp owns one row: a query t of one (b, h) in the forward and dq kernels, a key s
// in the dk/dv kernel. Each lane keeps kPerLane = ceil(Dh / 32) elements of that row in
// registers, elements d = lane + 32 i (so the warp's loads of a row are coalesced); lanes past Dh
// hold zeros. The warp walks the other side of the causal triangle one row at a time; each dot
// product is a per-lane partial sum finished by an xor-butterfly shuffle reduction, which leaves
// the bitwise-same total in every lane (float addition is commutative), so every per-row scalar
// (scores, running max, probabilities) is warp-uniform and so is every branch on it.
//   forward:   for s <= t, online softmax (running max m, running sum l, unnormalised o):
//              out_t = o / l,  lse_t = m + log l
//   backward:  recompute p_ts = exp(scale q_t . k_s - lse_t) (FlashAttention-2, Dao 2023):
//              D_t = dout_t . out_t;  dp_ts = dout_t . v_s;  ds_ts = p_ts (dp_ts - D_t)
//              dq_t = sum_{s<=t} scale ds_ts k_s                (dq kernel, one warp per t)
//              dv_s = sum_{t>=s} p_ts dout_t;  dk_s = sum_{t>=s} scale ds_ts q_t
//                                                               (dk/dv kernel, one warp per s)
//   The dq kernel also computes D_t (it has dout_t and out_t at hand) and leaves it in the
//   caller's scratch for the dk/dv kernel, queued after it on the same stream.
// Memory: nothing (T, T) is stored; the backward's only scratch is D (B, H, T).
// Determinism: every output element is written by one warp that sums in a fixed order; no
// atomics. Every element of out, lse and dqkv is written (dqkv is overwritten, not accumulated).
// Float accumulation throughout, like the CPU version; the order of summation differs from it,
// so results agree to rounding, not bitwise.
// Rows map to warps as row = (b H + h) T + t (the lse layout), so a block's warps work on
// neighbouring rows of one head and share the keys they read through L1/L2. A grid-stride loop
// over rows keeps the grid within kMaxBlocks for any size.
#include "kernels/cuda/attention.h"

#include <cmath>
#include <type_traits>

#include "kernels/cuda/launch_shape.h"

namespace pt::cuda {

namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;
constexpr int kThreadsPerBlock = kWarpsPerBlock * kWarpSize;
constexpr unsigned kFullWarp = 0xffffffffu;

// The sum of x over the warp, identical in every lane (see the design note).
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    x += __shfl_xor_sync(kFullWarp, x, offset);
  }
  return x;
}

// This lane's elements of a head row (d = lane + 32 i); zeros past Dh so dot products ignore them.
template <int kPerLane>
__device__ __forceinline__ void load_row(const float* __restrict__ row, int lane, int Dh,
                                         float (&x)[kPerLane]) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + kWarpSize * i;
    x[i] = d < Dh ? row[d] : 0.f;
  }
}

template <int kPerLane>
__device__ __forceinline__ void store_row(float* __restrict__ row, int lane, int Dh,
                                          const float (&x)[kPerLane]) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + kWarpSize * i;
    if (d < Dh) row[d] = x[i];
  }
}

// a . b over the whole row, identical in every lane.
template <int kPerLane>
__device__ __forceinline__ float warp_dot(const float (&a)[kPerLane], const float (&b)[kPerLane]) {
  float partial = 0.f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) partial += a[i] * b[i];
  return warp_sum(partial);
}

// Where row (b, h, t) of each tensor lives. qkv rows of one head are 3 H Dh apart and out/dout
// rows H Dh apart; q, k and v of one position are H Dh apart within the qkv row.
struct RowIndex {
  int64_t t;         // position in the sequence
  int64_t qkv_base;  // offset of q[b, 0, h] in qkv (k and v follow at + d_model, + 2 d_model)
  int64_t out_base;  // offset of out[b, 0, h] in out and dout
};

__device__ __forceinline__ RowIndex row_index(int64_t row, int64_t T, int64_t H, int64_t Dh) {
  const int64_t t = row % T;
  const int64_t bh = row / T;
  const int64_t b = bh / H;
  const int64_t h = bh % H;
  const int64_t d_model = H * Dh;
  return {t, b * T * 3 * d_model + h * Dh, b * T * d_model + h * Dh};
}

// The warp this thread belongs to, counted over the grid, and the number of warps in the grid;
// both are the same in every lane, so the grid-stride loops below are warp-uniform.
__device__ __forceinline__ int64_t grid_warp() {
  return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
}
__device__ __forceinline__ int64_t grid_warps() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x / kWarpSize;
}

// One warp per query row (b, h, t): rows = B H T.
template <int kPerLane>
__global__ void __launch_bounds__(kThreadsPerBlock)
    attention_forward_kernel(const float* __restrict__ qkv, float* __restrict__ out,
                             float* __restrict__ lse, int64_t rows, int64_t T, int64_t H, int Dh,
                             float scale) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t d_model = H * Dh;
  const int64_t qkv_stride = 3 * d_model;
  for (int64_t row = grid_warp(); row < rows; row += grid_warps()) {
    const RowIndex r = row_index(row, T, H, Dh);
    const float* k_rows = qkv + r.qkv_base + d_model;
    const float* v_rows = k_rows + d_model;
    float q[kPerLane];
    load_row(qkv + r.qkv_base + r.t * qkv_stride, lane, Dh, q);
    float acc[kPerLane] = {};  // unnormalised output, scaled to the running max
    float running_max = -INFINITY;
    float running_sum = 0.f;
    for (int64_t s = 0; s <= r.t; ++s) {
      float k[kPerLane];
      float v[kPerLane];
      load_row(k_rows + s * qkv_stride, lane, Dh, k);
      load_row(v_rows + s * qkv_stride, lane, Dh, v);
      const float score = scale * warp_dot(q, k);
      if (score > running_max) {  // warp-uniform: score and running_max agree in all lanes
        const float rescale = expf(running_max - score);  // 0 on the first key (max = -inf)
        running_sum *= rescale;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) acc[i] *= rescale;
        running_max = score;
      }
      const float weight = expf(score - running_max);
      running_sum += weight;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) acc[i] += weight * v[i];
    }
    // running_sum >= 1: the key that set the final max added e^0, never rescaled afterwards.
    const float inv_sum = 1.f / running_sum;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] *= inv_sum;
    store_row(out + r.out_base + r.t * d_model, lane, Dh, acc);
    if (lane == 0) lse[row] = running_max + logf(running_sum);
  }
}

// One warp per query row (b, h, t): D_t into delta (B, H, T), then dq_t into its dqkv slot.
template <int kPerLane>
__global__ void __launch_bounds__(kThreadsPerBlock)
    attention_backward_dq_kernel(const float* __restrict__ qkv, const float* __restrict__ out,
                                 const float* __restrict__ dout, const float* __restrict__ lse,
                                 float* __restrict__ dqkv, float* __restrict__ delta, int64_t rows,
                                 int64_t T, int64_t H, int Dh, float scale) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t d_model = H * Dh;
  const int64_t qkv_stride = 3 * d_model;
  for (int64_t row = grid_warp(); row < rows; row += grid_warps()) {
    const RowIndex r = row_index(row, T, H, Dh);
    const float* k_rows = qkv + r.qkv_base + d_model;
    const float* v_rows = k_rows + d_model;
    float q[kPerLane];
    float g[kPerLane];  // dout_t
    float o[kPerLane];  // out_t
    load_row(qkv + r.qkv_base + r.t * qkv_stride, lane, Dh, q);
    load_row(dout + r.out_base + r.t * d_model, lane, Dh, g);
    load_row(out + r.out_base + r.t * d_model, lane, Dh, o);
    const float row_delta = warp_dot(g, o);
    if (lane == 0) delta[row] = row_delta;
    const float row_lse = lse[row];
    float dq[kPerLane] = {};
    for (int64_t s = 0; s <= r.t; ++s) {
      float k[kPerLane];
      float v[kPerLane];
      load_row(k_rows + s * qkv_stride, lane, Dh, k);
      load_row(v_rows + s * qkv_stride, lane, Dh, v);
      const float p = expf(scale * warp_dot(q, k) - row_lse);
      const float ds = p * (warp_dot(g, v) - row_delta);
      const float coeff = scale * ds;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) dq[i] += coeff * k[i];
    }
    store_row(dqkv + r.qkv_base + r.t * qkv_stride, lane, Dh, dq);
  }
}

// One warp per key row (b, h, s): dk_s and dv_s into their dqkv slots. Reads delta, which the
// dq kernel (queued before this one on the same stream) wrote.
template <int kPerLane>
__global__ void __launch_bounds__(kThreadsPerBlock)
    attention_backward_dkdv_kernel(const float* __restrict__ qkv, const float* __restrict__ dout,
                                   const float* __restrict__ lse, const float* __restrict__ delta,
                                   float* __restrict__ dqkv, int64_t rows, int64_t T, int64_t H,
                                   int Dh, float scale) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t d_model = H * Dh;
  const int64_t qkv_stride = 3 * d_model;
  for (int64_t row = grid_warp(); row < rows; row += grid_warps()) {
    const RowIndex r = row_index(row, T, H, Dh);
    const int64_t s = r.t;              // this warp's row is a key
    const int64_t head_row0 = row - s;  // row of (b, h, 0) in lse and delta
    const float* q_rows = qkv + r.qkv_base;
    const float* g_rows = dout + r.out_base;
    float k[kPerLane];
    float v[kPerLane];
    load_row(q_rows + d_model + s * qkv_stride, lane, Dh, k);
    load_row(q_rows + 2 * d_model + s * qkv_stride, lane, Dh, v);
    float dk[kPerLane] = {};
    float dv[kPerLane] = {};
    for (int64_t t = s; t < T; ++t) {
      float q[kPerLane];
      float g[kPerLane];  // dout_t
      load_row(q_rows + t * qkv_stride, lane, Dh, q);
      load_row(g_rows + t * d_model, lane, Dh, g);
      const float p = expf(scale * warp_dot(q, k) - lse[head_row0 + t]);
      const float ds = p * (warp_dot(g, v) - delta[head_row0 + t]);
      const float coeff = scale * ds;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        dv[i] += p * g[i];
        dk[i] += coeff * q[i];
      }
    }
    store_row(dqkv + r.qkv_base + d_model + s * qkv_stride, lane, Dh, dk);
    store_row(dqkv + r.qkv_base + 2 * d_model + s * qkv_stride, lane, Dh, dv);
  }
}

// Calls launch(std::integral_constant<int, kPerLane>{}) for kPerLane = ceil(Dh / 32) in 1..4;
// the caller has checked 1 <= Dh <= kMaxAttentionHeadDim.
static_assert(kMaxAttentionHeadDim == 4 * kWarpSize, "dispatch_per_lane covers 1..4 per lane");
template <class Launch>
void dispatch_per_lane(int64_t Dh, Launch&& launch) {
  switch (ceil_div(Dh, kWarpSize)) {
    case 1: launch(std::integral_constant<int, 1>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    case 3: launch(std::integral_constant<int, 3>{}); break;
    default: launch(std::integral_constant<int, 4>{}); break;
  }
}

// Blocks for one warp per row, capped; the kernels' grid-stride loops cover the rest.
unsigned blocks_for_rows(int64_t rows) {
  const int64_t wanted = ceil_div(rows, kWarpsPerBlock);
  return static_cast<unsigned>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
}

bool valid_shape(int64_t B, int64_t T, int64_t H, int64_t Dh) {
  return B >= 0 && T >= 0 && H >= 0 && Dh >= 1 && Dh <= kMaxAttentionHeadDim;
}

}  // namespace

cudaError_t launch_attention_forward(const float* qkv, float* out, float* lse, int64_t B, int64_t T,
                                     int64_t H, int64_t Dh, float scale, cudaStream_t stream) {
  if (!valid_shape(B, T, H, Dh)) return cudaErrorInvalidValue;
  const int64_t rows = B * H * T;
  if (rows == 0) return cudaSuccess;
  const unsigned blocks = blocks_for_rows(rows);
  const int head_dim = static_cast<int>(Dh);
  dispatch_per_lane(Dh, [&](auto per_lane) {
    attention_forward_kernel<decltype(per_lane)::value>
        <<<blocks, kThreadsPerBlock, 0, stream>>>(qkv, out, lse, rows, T, H, head_dim, scale);
  });
  return cudaGetLastError();
}

cudaError_t launch_attention_backward(const float* qkv, const float* out, const float* dout,
                                      const float* lse, float* dqkv, float* scratch, int64_t B,
                                      int64_t T, int64_t H, int64_t Dh, float scale,
                                      cudaStream_t stream) {
  if (!valid_shape(B, T, H, Dh)) return cudaErrorInvalidValue;
  const int64_t rows = B * H * T;
  if (rows == 0) return cudaSuccess;
  if (scratch == nullptr) return cudaErrorInvalidValue;
  const unsigned blocks = blocks_for_rows(rows);
  const int head_dim = static_cast<int>(Dh);
  cudaError_t error = cudaSuccess;
  dispatch_per_lane(Dh, [&](auto per_lane) {
    constexpr int kPerLane = decltype(per_lane)::value;
    attention_backward_dq_kernel<kPerLane><<<blocks, kThreadsPerBlock, 0, stream>>>(
        qkv, out, dout, lse, dqkv, scratch, rows, T, H, head_dim, scale);
    error = cudaGetLastError();
    if (error != cudaSuccess) return;  // the dk/dv kernel needs the dq kernel's D
    attention_backward_dkdv_kernel<kPerLane><<<blocks, kThreadsPerBlock, 0, stream>>>(
        qkv, dout, lse, scratch, dqkv, rows, T, H, head_dim, scale);
    error = cudaGetLastError();
  });
  return error;
}

}  // namespace pt::cuda
