// Activation functions and their derivatives, in float, with PyTorch's formulas. The
// transcendental ones use the vectorisable maths of cpu_math.h; each loop is compiled for
// several vector ISAs (PT_CPU_SIMD_CLONES). x and y may alias (in-place activations).
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_loops.h"
#include "kernels/cpu/cpu_math.h"

namespace pt {

namespace {

constexpr float kInvSqrt2Pi = 0.39894228040143267794f;   // 1/sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kGeluCoeff = 0.044715f;

// Transcendental activations cost several times a load/store: go parallel sooner.
constexpr int64_t kTranscendentalWork = 8;

// ---- forward loops: y[0, n) = f(x) -------------------------------------------------------

PT_CPU_SIMD_CLONES void relu_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

// 0.5 x (1 + erf(x / sqrt 2)) = x Phi(x).
PT_CPU_SIMD_CLONES void gelu_erf_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * cpu::normal_cdf_f32(x[i]);
}

// 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), evaluated as x sigmoid(2u) (the same
// function: (1 + tanh u) / 2 = 1 / (1 + e^{-2u})), one exp and one divide, accurate in both tails.
PT_CPU_SIMD_CLONES void gelu_tanh_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kSqrt2OverPi * (v + kGeluCoeff * v * v * v);
    y[i] = v / (1.f + cpu::exp_f32(-2.f * u));
  }
}

PT_CPU_SIMD_CLONES void tanh_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = cpu::tanh_f32(x[i]);
}

// ---- backward loops: dx[0, n) = f'(x) dy -------------------------------------------------

PT_CPU_SIMD_CLONES void relu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0.f ? dy[i] : 0.f;
}

// d/dx x Phi(x) = Phi(x) + x phi(x).
PT_CPU_SIMD_CLONES void gelu_erf_backward(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float pdf = kInvSqrt2Pi * cpu::exp_f32(-0.5f * v * v);
    dx[i] = dy[i] * (cpu::normal_cdf_f32(v) + v * pdf);
  }
}

// PyTorch's GeluBackward (approximate='tanh'): with t = tanh(u),
// dx = dy (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)). With
// s = sigmoid(2u): 0.5 (1 + t) = s and 1 - t^2 = 4 s (1 - s).
PT_CPU_SIMD_CLONES void gelu_tanh_backward(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float v2 = v * v;
    const float u = kSqrt2OverPi * (v + kGeluCoeff * v2 * v);
    const float s = 1.f / (1.f + cpu::exp_f32(-2.f * u));
    const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCoeff * v2);
    dx[i] = dy[i] * (s + 2.f * v * s * (1.f - s) * du);
  }
}

// Reads y = tanh(x): 1 - y^2.
PT_CPU_SIMD_CLONES void tanh_backward(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (1.f - y[i] * y[i]);
}

}  // namespace

void CpuBackend::activation_forward(Activation f, const float* x, float* y, int64_t n) {
  void (*loop)(const float*, float*, int64_t) = nullptr;
  int64_t cost = kTranscendentalWork;
  switch (f) {
    case Activation::relu: loop = relu_forward, cost = 1; break;
    case Activation::gelu_erf: loop = gelu_erf_forward; break;
    case Activation::gelu_tanh: loop = gelu_tanh_forward; break;
    case Activation::tanh: loop = tanh_forward; break;
  }
  cpu::parallel_chunks(threads_, n, n * cost, 16,
                       [=](int64_t i0, int64_t i1) { loop(x + i0, y + i0, i1 - i0); });
}

// ReLU and GELU read x; Tanh reads y = tanh(x).
void CpuBackend::activation_backward(Activation f, const float* x, const float* y, const float* dy,
                                     float* dx, int64_t n) {
  void (*loop)(const float*, const float*, float*, int64_t) = nullptr;
  const float* in = x;
  int64_t cost = kTranscendentalWork;
  switch (f) {
    case Activation::relu: loop = relu_backward, cost = 1; break;
    case Activation::gelu_erf: loop = gelu_erf_backward; break;
    case Activation::gelu_tanh: loop = gelu_tanh_backward; break;
    case Activation::tanh: loop = tanh_backward, in = y, cost = 1; break;
  }
  cpu::parallel_chunks(threads_, n, n * cost, 16,
                       [=](int64_t i0, int64_t i1) { loop(in + i0, dy + i0, dx + i0, i1 - i0); });
}

}  // namespace pt
