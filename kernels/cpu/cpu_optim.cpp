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
// g = nesterov ? g + momentum buf : buf; p_out = p - lr g.
//
// The loops come in two forms, in place (param_out == param) and out of place (disjoint
// buffers), so that every pointer can be __restrict in both and the loops vectorise without a
// runtime overlap check (which would send the in-place form to the scalar path).

namespace {

struct SgdScalars {
  float lr, wd, mom, damp;
  bool first, nesterov;
};

template <bool kInPlace>
void sgd_plain_loop(const float* __restrict in, const float* __restrict gr, float* __restrict out,
                    int64_t n, SgdScalars k) {
  const float* w = kInPlace ? out : in;
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] - k.lr * (gr[i] + k.wd * w[i]);
}

template <bool kInPlace>
void sgd_momentum_loop(const float* __restrict in, const float* __restrict gr,
                       float* __restrict out, float* __restrict buf, int64_t n, SgdScalars k) {
  const float* w = kInPlace ? out : in;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gr[i] + k.wd * w[i];
    const float b = k.first ? g : k.mom * buf[i] + k.damp * g;
    buf[i] = b;
    out[i] = w[i] - k.lr * (k.nesterov ? g + k.mom * b : b);
  }
}

}  // namespace

void CpuBackend::sgd_update(const float* param, const float* grad, float* param_out,
                            float* momentum_buf, int64_t n, const SgdParams& p) {
  require_in_place_or_disjoint("sgd_update", param, param_out, n);
  const SgdScalars k{p.lr, p.weight_decay, p.momentum, 1.f - p.dampening, p.first_step, p.nesterov};
  const bool in_place = param == param_out;
  if (k.mom == 0.f) {
    cpu::parallel_elements(threads_, n, [=](int64_t i0, int64_t i1) {
      if (in_place)
        sgd_plain_loop<true>(nullptr, grad + i0, param_out + i0, i1 - i0, k);
      else
        sgd_plain_loop<false>(param + i0, grad + i0, param_out + i0, i1 - i0, k);
    });
    return;
  }
  if (momentum_buf == nullptr)
    throw UsageError(fmt::format(
        "sgd_update: momentum is {} but no momentum buffer was given; allocate one of {} floats",
        k.mom, n));
  cpu::parallel_elements(threads_, n, [=](int64_t i0, int64_t i1) {
    if (in_place)
      sgd_momentum_loop<true>(nullptr, grad + i0, param_out + i0, momentum_buf + i0, i1 - i0, k);
    else
      sgd_momentum_loop<false>(param + i0, grad + i0, param_out + i0, momentum_buf + i0, i1 - i0,
                               k);
  });
}

// ---- AdamW --------------------------------------------------------------------------------
// p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p_out = p decayed - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps). The bias
// corrections are host scalars computed in double, as PyTorch does; the per-element work is
// float.

namespace {

struct AdamWScalars {
  float decay, step_size, bc2_sqrt, b1, b2, c1, c2, eps;
  float ahead_m, ahead_g;  // nesterov: the look-ahead's factors of m and g (op_params.h)
};

template <bool kInPlace>
[[gnu::always_inline]] inline void adamw_body(const float* __restrict in,
                                              const float* __restrict gr, float* __restrict out,
                                              float* __restrict pm, float* __restrict pv, int64_t n,
                                              AdamWScalars k) {
  const float* w = kInPlace ? out : in;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gr[i];
    const float mi = k.b1 * pm[i] + k.c1 * g;
    const float vi = k.b2 * pv[i] + k.c2 * (g * g);
    pm[i] = mi;
    pv[i] = vi;
    const float denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
    out[i] = w[i] * k.decay - k.step_size * (mi / denom);
  }
}

// sqrt and divide per element: compute-bound without wide vectors, hence the clones (of plain
// functions: GCC does not clone templates).
PT_CPU_SIMD_CLONES void adamw_in_place(const float* gr, float* w, float* pm, float* pv, int64_t n,
                                       AdamWScalars k) {
  adamw_body<true>(nullptr, gr, w, pm, pv, n, k);
}
PT_CPU_SIMD_CLONES void adamw_out_of_place(const float* in, const float* gr, float* out, float* pm,
                                           float* pv, int64_t n, AdamWScalars k) {
  adamw_body<false>(in, gr, out, pm, pv, n, k);
}

// The look-ahead form (AdamWParams::nesterov): not cloned, it is not on the default path.
void adamw_nesterov(const float* in, const float* gr, float* out, float* pm, float* pv, int64_t n,
                    AdamWScalars k) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gr[i];
    const float w = in[i];  // read before out[i] is written: in == out in place
    const float mi = k.b1 * pm[i] + k.c1 * g;
    const float vi = k.b2 * pv[i] + k.c2 * (g * g);
    pm[i] = mi;
    pv[i] = vi;
    const float denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
    out[i] = w * k.decay - (k.ahead_m * mi + k.ahead_g * g) / denom;
  }
}

}  // namespace

void CpuBackend::adamw_update(const float* param, const float* grad, float* param_out, float* m,
                              float* v, int64_t n, const AdamWParams& p) {
  if (p.step < 1)
    throw UsageError(fmt::format("adamw_update: step must count from 1, got {}", p.step));
  require_in_place_or_disjoint("adamw_update", param, param_out, n);
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
  k.ahead_m = static_cast<float>(p.lr * static_cast<double>(p.beta1) /
                                 (1.0 - std::pow(static_cast<double>(p.beta1), t + 1)));
  k.ahead_g = static_cast<float>(p.lr * (1.0 - static_cast<double>(p.beta1)) /
                                 (1.0 - std::pow(static_cast<double>(p.beta1), t)));
  const bool in_place = param == param_out;
  cpu::parallel_elements(threads_, n, [=](int64_t i0, int64_t i1) {
    if (p.nesterov)
      adamw_nesterov(param + i0, grad + i0, param_out + i0, m + i0, v + i0, i1 - i0, k);
    else if (in_place)
      adamw_in_place(grad + i0, param_out + i0, m + i0, v + i0, i1 - i0, k);
    else
      adamw_out_of_place(param + i0, grad + i0, param_out + i0, m + i0, v + i0, i1 - i0, k);
  });
}

}  // namespace pt
