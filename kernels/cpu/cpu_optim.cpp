// Whole-buffer reductions and fused optimizer updates (one pass over param, grad and state:
// the update is memory-bound, see ARCHITECTURE.md).
#include <atomic>
#include <bit>
#include <cmath>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_loops.h"
#include "kernels/cpu/cpu_math.h"

namespace pt {

// ---- reductions ---------------------------------------------------------------------------

double CpuBackend::sum_squares(const float* x, int64_t n) {
  return cpu::block_sum(threads_, n, [=](int64_t i) {
    const double v = x[i];
    return v * v;
  });
}

// Finite iff the exponent bits are not all ones (a bit test vectorises; std::isfinite may not).
bool CpuBackend::all_finite(const float* x, int64_t n) {
  std::atomic<bool> finite{true};
  cpu::parallel_elements(threads_, n, [&](int64_t i0, int64_t i1) {
    uint32_t bad = 0;
    for (int64_t i = i0; i < i1; ++i)
      bad |= static_cast<uint32_t>((std::bit_cast<uint32_t>(x[i]) & 0x7f800000u) == 0x7f800000u);
    if (bad) finite = false;
  });
  return finite.load();
}

// ---- SGD ----------------------------------------------------------------------------------
// g = grad + wd p; buf = first_step ? g : momentum buf + (1 - dampening) g;
// g = nesterov ? g + momentum buf : buf; p -= lr g.
void CpuBackend::sgd_update(float* param, const float* grad, float* momentum_buf, int64_t n,
                            const SgdParams& p) {
  const float lr = p.lr, wd = p.weight_decay, mom = p.momentum, damp = 1.f - p.dampening;
  if (mom == 0.f) {
    cpu::parallel_elements(threads_, n, [=](int64_t i0, int64_t i1) {
      float* __restrict w = param;
      const float* __restrict gr = grad;
      for (int64_t i = i0; i < i1; ++i) w[i] -= lr * (gr[i] + wd * w[i]);
    });
    return;
  }
  if (momentum_buf == nullptr)
    throw UsageError(fmt::format(
        "sgd_update: momentum is {} but no momentum buffer was given; allocate one of {} floats",
        mom, n));
  const bool first = p.first_step, nesterov = p.nesterov;
  cpu::parallel_elements(threads_, n, [=](int64_t i0, int64_t i1) {
    float* __restrict w = param;
    const float* __restrict gr = grad;
    float* __restrict buf = momentum_buf;
    for (int64_t i = i0; i < i1; ++i) {
      const float g = gr[i] + wd * w[i];
      const float b = first ? g : mom * buf[i] + damp * g;
      buf[i] = b;
      w[i] -= lr * (nesterov ? g + mom * b : b);
    }
  });
}

// ---- AdamW --------------------------------------------------------------------------------
// p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps). The bias corrections are host
// scalars computed in double, as PyTorch does; the per-element work is float.

namespace {

struct AdamWScalars {
  float decay, step_size, bc2_sqrt, b1, b2, c1, c2, eps;
};

// sqrt and divide per element: compute-bound without wide vectors, hence the clones.
PT_CPU_SIMD_CLONES void adamw_loop(float* __restrict w, const float* __restrict gr,
                                   float* __restrict pm, float* __restrict pv, int64_t n,
                                   AdamWScalars k) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gr[i];
    const float mi = k.b1 * pm[i] + k.c1 * g;
    const float vi = k.b2 * pv[i] + k.c2 * (g * g);
    pm[i] = mi;
    pv[i] = vi;
    const float denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
    w[i] = w[i] * k.decay - k.step_size * (mi / denom);
  }
}

}  // namespace

void CpuBackend::adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                              const AdamWParams& p) {
  if (p.step < 1)
    throw UsageError(fmt::format("adamw_update: step must count from 1, got {}", p.step));
  const double t = static_cast<double>(p.step);
  AdamWScalars k;
  k.decay = static_cast<float>(1.0 - static_cast<double>(p.lr) * p.weight_decay);
  k.step_size = static_cast<float>(p.lr / (1.0 - std::pow(static_cast<double>(p.beta1), t)));
  k.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(p.beta2), t)));
  k.b1 = p.beta1;
  k.b2 = p.beta2;
  k.c1 = 1.f - p.beta1;
  k.c2 = 1.f - p.beta2;
  k.eps = p.eps;
  cpu::parallel_elements(threads_, n, [=](int64_t i0, int64_t i1) {
    adamw_loop(param + i0, grad + i0, m + i0, v + i0, i1 - i0, k);
  });
}

}  // namespace pt
