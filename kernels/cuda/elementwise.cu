// Elementwise ops, bias add/reduce, activations and dropout (see elementwise.h).
//
// Design: every op but the column sums is one grid-stride kernel, for_each_index_kernel, run
// over a small functor that says what happens to element i; launch_shape.h sizes the grid. The
// results match kernels/cpu bit for bit: that code is compiled with -ffp-contract=off, so every
// multiply here is __fmul_rn (nvcc never fuses it into an FMA, whatever -fmad says) and every
// divide and square root the IEEE-rounded intrinsic (immune to -use_fast_math's approximations),
// and the transcendental activations use the same polynomials as kernels/cpu/cpu_math.h, ported
// below operation for operation, not CUDA's expf/tanhf/erff. (Flushing denormals, -ftz=true,
// would still break the agreement for tiny values.) sum_rows_accumulate cannot be a plain
// elementwise loop: each block owns 32 columns, its warps sum interleaved slices of the rows in
// row order and one thread per column adds the slices in slice order, so every sum has a fixed
// order that depends on rows alone; no atomics, hence deterministic, but not the CPU's order.
#include "kernels/cuda/elementwise.h"

#include "engine/core/random.h"
#include "kernels/cuda/for_each.cuh"

namespace pt::cuda {

namespace {

// ---- simple elementwise ops -----------------------------------------------------------------

struct AddOp {
  const float* a;
  const float* b;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = a[i] + b[i]; }
};

struct AxpyOp {
  float alpha;
  const float* x;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = y[i] + mul(alpha, x[i]); }
};

struct ScaleOp {
  float alpha;
  float* x;
  __device__ void operator()(int64_t i) const { x[i] = mul(x[i], alpha); }
};

struct AddBiasOp {
  float* y;
  const float* bias;
  int64_t cols;
  __device__ void operator()(int64_t i) const { y[i] = y[i] + bias[i % cols]; }
};

// ---- column sums ----------------------------------------------------------------------------

constexpr int kColumnsPerBlock = 32;  // a warp reads 32 adjacent floats of a row: coalesced
constexpr int kRowSlices = 32;        // warps per block, each summing every kRowSlices-th row

__global__ void __launch_bounds__(kColumnsPerBlock* kRowSlices)
    column_sums_accumulate_kernel(const float* x, float* out, int64_t rows, int64_t cols) {
  __shared__ float slice_sums[kRowSlices][kColumnsPerBlock];
  const int lane = static_cast<int>(threadIdx.x);
  const int slice = static_cast<int>(threadIdx.y);
  // A grid-stride loop over column tiles: the grid size changes which block sums a column,
  // never the order of its sum.
  const int64_t tile_stride = static_cast<int64_t>(gridDim.x) * kColumnsPerBlock;
  for (int64_t c0 = static_cast<int64_t>(blockIdx.x) * kColumnsPerBlock; c0 < cols;
       c0 += tile_stride) {
    const int64_t c = c0 + lane;
    float acc = 0.f;
    if (c < cols) {
#pragma unroll 4
      for (int64_t r = slice; r < rows; r += kRowSlices) acc += x[r * cols + c];
    }
    slice_sums[slice][lane] = acc;
    __syncthreads();
    if (slice == 0 && c < cols) {
      float total = 0.f;
      for (int s = 0; s < kRowSlices; ++s) total += slice_sums[s][lane];
      out[c] += total;
    }
    __syncthreads();  // the next tile overwrites slice_sums
  }
}

// ---- activations ----------------------------------------------------------------------------
// Ports of kernels/cpu/cpu_math.h and cpu_activation.cpp: keep them in step with those files.

constexpr float kInvSqrt2Pi = 0.39894228040143267794f;   // 1/sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kGeluCoeff = 0.044715f;
constexpr float kThreeGeluCoeff = 3.f * kGeluCoeff;  // folded as the CPU compiler folds it

// e^x, cpu::exp_f32: Cody-Waite reduction with the 1.5*2^23 rounding trick, Cephes polynomial.
__device__ float exp_f32(float x) {
  constexpr float kHi = 88.3762626647949f, kLo = -87.3365447505531f;
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const float xc = x > kHi ? kHi : (x < kLo ? kLo : x);
  const float t = mul(xc, kLog2e) + kRound;
  const float n = t - kRound;
  const float r = (xc - mul(n, kLn2Hi)) - mul(n, kLn2Lo);
  float p = 1.9875691500e-4f;
  p = mul(p, r) + 1.3981999507e-3f;
  p = mul(p, r) + 8.3334519073e-3f;
  p = mul(p, r) + 4.1665795894e-2f;
  p = mul(p, r) + 1.6666665459e-1f;
  p = mul(p, r) + 5.0000001201e-1f;
  const float er = mul(p, mul(r, r)) + r + 1.f;
  const uint32_t bits = (__float_as_uint(t) - 0x4B400000u + 127u) << 23;
  const float y = mul(er, __uint_as_float(bits));
  return x > kHi ? __uint_as_float(0x7f800000u) : (x < kLo ? 0.f : y);
}

// tanh(x), cpu::tanh_f32: odd polynomial below |x| = 0.625, 1 - 2 / (e^{2|x|} + 1) above.
__device__ float tanh_f32(float x) {
  const float ax = x < 0.f ? -x : x;
  const float s = mul(x, x);
  float p = -5.70498872745e-3f;
  p = mul(p, s) + 2.06390887954e-2f;
  p = mul(p, s) - 5.37397155531e-2f;
  p = mul(p, s) + 1.33314422036e-1f;
  p = mul(p, s) - 3.33332819422e-1f;
  const float small = mul(mul(p, s), x) + x;
  const float big_abs = 1.f - div(2.f, exp_f32(mul(2.f, ax)) + 1.f);
  const float big = x < 0.f ? -big_abs : big_abs;
  return ax < 0.625f ? small : big;
}

// Phi(x), cpu::normal_cdf_f32: erfc through Numerical Recipes' Chebyshev fit.
__device__ float normal_cdf_f32(float x) {
  const float z = mul(x < 0.f ? -x : x, 0.70710678118654752440f);
  const float t = div(1.f, 1.f + mul(0.5f, z));
  float p = 0.17087277f;
  p = mul(p, t) - 0.82215223f;
  p = mul(p, t) + 1.48851587f;
  p = mul(p, t) - 1.13520398f;
  p = mul(p, t) + 0.27886807f;
  p = mul(p, t) - 0.18628806f;
  p = mul(p, t) + 0.09678418f;
  p = mul(p, t) + 0.37409196f;
  p = mul(p, t) + 1.00002368f;
  p = mul(p, t) - 1.26551223f;
  const float half_erfc = mul(mul(0.5f, t), exp_f32(p - mul(z, z)));
  return x < 0.f ? half_erfc : 1.f - half_erfc;
}

template <Activation F>
__device__ float activation_value(float v) {
  if constexpr (F == Activation::relu) {
    return v > 0.f ? v : 0.f;
  } else if constexpr (F == Activation::gelu_erf) {
    return mul(v, normal_cdf_f32(v));  // x Phi(x)
  } else if constexpr (F == Activation::gelu_tanh) {
    // x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): the CPU's form of 0.5 x (1 + tanh u).
    const float u = mul(kSqrt2OverPi, v + mul(mul(mul(kGeluCoeff, v), v), v));
    return div(v, 1.f + exp_f32(mul(-2.f, u)));
  } else {
    return tanh_f32(v);
  }
}

// f'(x) dy; `in` is y = tanh(x) for Tanh and x otherwise.
template <Activation F>
__device__ float activation_gradient(float in, float dy) {
  if constexpr (F == Activation::relu) {
    return in > 0.f ? dy : 0.f;
  } else if constexpr (F == Activation::gelu_erf) {
    // Phi(x) + x phi(x).
    const float pdf = mul(kInvSqrt2Pi, exp_f32(mul(mul(-0.5f, in), in)));
    return mul(dy, normal_cdf_f32(in) + mul(in, pdf));
  } else if constexpr (F == Activation::gelu_tanh) {
    // PyTorch's tanh-GELU derivative with s = sigmoid(2u): s + 2 x s (1 - s) du/dx.
    const float v2 = mul(in, in);
    const float u = mul(kSqrt2OverPi, in + mul(mul(kGeluCoeff, v2), in));
    const float s = div(1.f, 1.f + exp_f32(mul(-2.f, u)));
    const float du = mul(kSqrt2OverPi, 1.f + mul(kThreeGeluCoeff, v2));
    return mul(dy, s + mul(mul(mul(mul(2.f, in), s), 1.f - s), du));
  } else {
    return mul(dy, 1.f - mul(in, in));  // 1 - tanh^2
  }
}

template <Activation F>
struct ActivationForwardOp {
  const float* x;
  float* y;
  __device__ void operator()(int64_t i) const { y[i] = activation_value<F>(x[i]); }
};

template <Activation F>
struct ActivationBackwardOp {
  const float* x;
  const float* y;
  const float* dy;
  float* dx;
  __device__ void operator()(int64_t i) const {
    const float in = F == Activation::tanh ? y[i] : x[i];
    dx[i] = activation_gradient<F>(in, dy[i]);
  }
};

// Instantiates Op<f> for the runtime value f and runs it over n elements.
template <template <Activation> class Op, class... Args>
cudaError_t launch_activation(Activation f, int64_t n, cudaStream_t stream, Args... args) {
  switch (f) {
    case Activation::relu: return launch_for_each(n, Op<Activation::relu>{args...}, stream);
    case Activation::gelu_tanh:
      return launch_for_each(n, Op<Activation::gelu_tanh>{args...}, stream);
    case Activation::gelu_erf: return launch_for_each(n, Op<Activation::gelu_erf>{args...}, stream);
    case Activation::tanh: return launch_for_each(n, Op<Activation::tanh>{args...}, stream);
  }
  return cudaErrorInvalidValue;
}

// ---- dropout --------------------------------------------------------------------------------

struct DropoutOp {
  const float* in;
  float* out;
  float p;
  float keep_scale;
  uint64_t key;
  __device__ void operator()(int64_t i) const {
    // A select, not a multiply by a 0/1 mask: a dropped inf or NaN still gives 0, as on the CPU.
    const bool keep = counter_uniform(key, static_cast<uint64_t>(i)) >= p;
    out[i] = keep ? mul(in[i], keep_scale) : 0.f;
  }
};

cudaError_t launch_dropout(const float* in, float* out, int64_t n, float p, uint64_t key,
                           cudaStream_t stream) {
  // Computed on the host exactly as the CPU backend does; p >= 1 keeps nothing, so its scale
  // is never used.
  const float keep_scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  return launch_for_each(n, DropoutOp{in, out, p, keep_scale, key}, stream);
}

}  // namespace

cudaError_t launch_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream) {
  return launch_for_each(n, AddOp{a, b, y}, stream);
}

cudaError_t launch_axpy(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream) {
  return launch_for_each(n, AxpyOp{alpha, x, y}, stream);
}

cudaError_t launch_scale(float alpha, float* x, int64_t n, cudaStream_t stream) {
  return launch_for_each(n, ScaleOp{alpha, x}, stream);
}

cudaError_t launch_add_bias(float* y, const float* bias, int64_t rows, int64_t cols,
                            cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return launch_for_each(rows * cols, AddBiasOp{y, bias, cols}, stream);
}

cudaError_t launch_sum_rows_accumulate(const float* x, float* out, int64_t rows, int64_t cols,
                                       cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const LaunchShape1d tiles = launch_shape_1d(cols, kColumnsPerBlock);
  const dim3 block(kColumnsPerBlock, kRowSlices);
  column_sums_accumulate_kernel<<<static_cast<unsigned>(tiles.blocks), block, 0, stream>>>(
      x, out, rows, cols);
  return cudaGetLastError();
}

cudaError_t launch_activation_forward(Activation f, const float* x, float* y, int64_t n,
                                      cudaStream_t stream) {
  return launch_activation<ActivationForwardOp>(f, n, stream, x, y);
}

cudaError_t launch_activation_backward(Activation f, const float* x, const float* y,
                                       const float* dy, float* dx, int64_t n, cudaStream_t stream) {
  return launch_activation<ActivationBackwardOp>(f, n, stream, x, y, dy, dx);
}

cudaError_t launch_dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t key,
                                   cudaStream_t stream) {
  return launch_dropout(x, y, n, p, key, stream);
}

cudaError_t launch_dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t key,
                                    cudaStream_t stream) {
  return launch_dropout(dy, dx, n, p, key, stream);
}

}  // namespace pt::cuda
