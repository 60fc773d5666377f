// Pooling (see pool.h). Forward passes give each output element one thread (a grid-stride loop
// over N*C*P*Q) that scans its window in the CPU's order (rows, then columns), so y, argmax and
// the float window sums are bit-identical to the CPU. Backward passes are gathers, not
// scatters: each input element gets one thread that visits the windows covering it in
// ascending (p, q) order and adds their contributions, starting from 0. That is the order in
// which the CPU's scatter adds into that element, so dx is deterministic and matches the CPU
// bit for bit, with no atomics; it also overwrites dx, as the CPU does.
#include "kernels/cuda/pool.h"

#include <cmath>

#include "kernels/cuda/launch_shape.h"

namespace pt::cuda {

namespace {

// Output index o along one axis covers input index i when o*stride - pad <= i <
// o*stride - pad + size. Sets [first, stop) to those o within [0, count).
__device__ void windows_covering(int64_t i, int64_t pad, int64_t size, int64_t stride,
                                 int64_t count, int64_t& first, int64_t& stop) {
  const int64_t hi = i + pad;        // o*stride <= hi
  const int64_t lo = hi - size + 1;  // o*stride >= lo
  first = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  stop = hi < 0 ? 0 : min(count, hi / stride + 1);
}

// PyTorch's count_include_pad divisor: the window clipped to the padded input (R*S except for
// ceil-mode windows that reach past the padding).
__device__ int64_t avg_divisor(const Pool2dShape& s, int64_t h0, int64_t w0) {
  const int64_t he = min(h0 + s.R, s.H + s.pad_h), we = min(w0 + s.S, s.W + s.pad_w);
  return (he - h0) * (we - w0);
}

__global__ void maxpool2d_forward_kernel(Pool2dShape s, const float* __restrict__ x,
                                         float* __restrict__ y, int32_t* __restrict__ argmax) {
  const int64_t total = s.N * s.C * s.P * s.Q;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < total;
       o += stride) {
    const int64_t q = o % s.Q, pq = o / s.Q;
    const int64_t p = pq % s.P, plane = pq / s.P;
    const float* xp = x + plane * s.H * s.W;
    const int64_t h0 = p * s.stride_h - s.pad_h, w0 = q * s.stride_w - s.pad_w;
    const int64_t hb = max(h0, int64_t{0}), he = min(h0 + s.R, s.H);
    const int64_t wb = max(w0, int64_t{0}), we = min(w0 + s.S, s.W);
    float best = -INFINITY;
    int64_t best_at = -1;
    for (int64_t h = hb; h < he; ++h)
      for (int64_t w = wb; w < we; ++w) {
        const float v = xp[h * s.W + w];
        // First maximum wins; a NaN wins over numbers (PyTorch propagates NaN).
        if (best_at < 0 || v > best || (v != v && best == best)) {
          best = v;
          best_at = h * s.W + w;
        }
      }
    y[o] = best;
    argmax[o] = static_cast<int32_t>(best_at);
  }
}

__global__ void maxpool2d_backward_kernel(Pool2dShape s, const float* __restrict__ dy,
                                          const int32_t* __restrict__ argmax,
                                          float* __restrict__ dx) {
  const int64_t total = s.N * s.C * s.H * s.W;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t w = i % s.W, hw = i / s.W;
    const int64_t h = hw % s.H, plane = hw / s.H;
    const float* dyp = dy + plane * s.P * s.Q;
    const int32_t* ap = argmax + plane * s.P * s.Q;
    const int64_t self = h * s.W + w;
    int64_t pb, pe, qb, qe;
    windows_covering(h, s.pad_h, s.R, s.stride_h, s.P, pb, pe);
    windows_covering(w, s.pad_w, s.S, s.stride_w, s.Q, qb, qe);
    // Only a window covering this element can have it as its argmax.
    float sum = 0.f;
    for (int64_t p = pb; p < pe; ++p)
      for (int64_t q = qb; q < qe; ++q)
        if (ap[p * s.Q + q] == self) sum += dyp[p * s.Q + q];
    dx[i] = sum;
  }
}

__global__ void avgpool2d_forward_kernel(Pool2dShape s, const float* __restrict__ x,
                                         float* __restrict__ y) {
  const int64_t total = s.N * s.C * s.P * s.Q;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < total;
       o += stride) {
    const int64_t q = o % s.Q, pq = o / s.Q;
    const int64_t p = pq % s.P, plane = pq / s.P;
    const float* xp = x + plane * s.H * s.W;
    const int64_t h0 = p * s.stride_h - s.pad_h, w0 = q * s.stride_w - s.pad_w;
    const int64_t hb = max(h0, int64_t{0}), he = min(h0 + s.R, s.H);
    const int64_t wb = max(w0, int64_t{0}), we = min(w0 + s.S, s.W);
    float sum = 0.f;
    for (int64_t h = hb; h < he; ++h)
      for (int64_t w = wb; w < we; ++w) sum += xp[h * s.W + w];
    y[o] = sum / static_cast<float>(avg_divisor(s, h0, w0));
  }
}

__global__ void avgpool2d_backward_kernel(Pool2dShape s, const float* __restrict__ dy,
                                          float* __restrict__ dx) {
  const int64_t total = s.N * s.C * s.H * s.W;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t w = i % s.W, hw = i / s.W;
    const int64_t h = hw % s.H, plane = hw / s.H;
    const float* dyp = dy + plane * s.P * s.Q;
    int64_t pb, pe, qb, qe;
    windows_covering(h, s.pad_h, s.R, s.stride_h, s.P, pb, pe);
    windows_covering(w, s.pad_w, s.S, s.stride_w, s.Q, qb, qe);
    float sum = 0.f;
    for (int64_t p = pb; p < pe; ++p)
      for (int64_t q = qb; q < qe; ++q) {
        const int64_t h0 = p * s.stride_h - s.pad_h, w0 = q * s.stride_w - s.pad_w;
        // Divide per window, as the CPU does, so the added terms round the same way.
        sum += dyp[p * s.Q + q] / static_cast<float>(avg_divisor(s, h0, w0));
      }
    dx[i] = sum;
  }
}

int64_t output_elements(const Pool2dShape& s) { return s.N * s.C * s.P * s.Q; }
int64_t input_elements(const Pool2dShape& s) { return s.N * s.C * s.H * s.W; }
bool valid_strides(const Pool2dShape& s) { return s.stride_h >= 1 && s.stride_w >= 1; }

}  // namespace

cudaError_t launch_maxpool2d_forward(const Pool2dShape& s, const float* x, float* y,
                                     int32_t* argmax, cudaStream_t stream) {
  const LaunchShape1d shape = launch_shape_1d(output_elements(s));
  if (shape.blocks == 0) return cudaSuccess;
  maxpool2d_forward_kernel<<<static_cast<unsigned>(shape.blocks),
                             static_cast<unsigned>(shape.threads), 0, stream>>>(s, x, y, argmax);
  return cudaGetLastError();
}

cudaError_t launch_maxpool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax,
                                      float* dx, cudaStream_t stream) {
  const LaunchShape1d shape = launch_shape_1d(input_elements(s));
  if (shape.blocks == 0) return cudaSuccess;
  if (!valid_strides(s)) return cudaErrorInvalidValue;  // the gather divides by the stride
  maxpool2d_backward_kernel<<<static_cast<unsigned>(shape.blocks),
                              static_cast<unsigned>(shape.threads), 0, stream>>>(s, dy, argmax, dx);
  return cudaGetLastError();
}

cudaError_t launch_avgpool2d_forward(const Pool2dShape& s, const float* x, float* y,
                                     cudaStream_t stream) {
  const LaunchShape1d shape = launch_shape_1d(output_elements(s));
  if (shape.blocks == 0) return cudaSuccess;
  avgpool2d_forward_kernel<<<static_cast<unsigned>(shape.blocks),
                             static_cast<unsigned>(shape.threads), 0, stream>>>(s, x, y);
  return cudaGetLastError();
}

cudaError_t launch_avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx,
                                      cudaStream_t stream) {
  const LaunchShape1d shape = launch_shape_1d(input_elements(s));
  if (shape.blocks == 0) return cudaSuccess;
  if (!valid_strides(s)) return cudaErrorInvalidValue;  // the gather divides by the stride
  avgpool2d_backward_kernel<<<static_cast<unsigned>(shape.blocks),
                              static_cast<unsigned>(shape.threads), 0, stream>>>(s, dy, dx);
  return cudaGetLastError();
}

}  // namespace pt::cuda
