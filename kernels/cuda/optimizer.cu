// SGD and AdamW updates (see optimizer.h).
//
// Design: each update is one grid-stride kernel, sized by launch_shape.h, that reads and writes
// every element once (the update is memory-bound). To take the CPU backend's step bit for bit,
// the per-element arithmetic is cpu_optim.cpp's, operation for operation: multiplies are
// __fmul_rn (never fused into an FMA, which kernels/cpu's -ffp-contract=off also forbids) and
// the divide and square root are the IEEE-rounded intrinsics, whatever the build's -fmad,
// -prec-div or -prec-sqrt. The scalars that do not depend on the element (1 - dampening,
// AdamW's bias corrections in double) are computed on the host as the CPU backend computes them
// and passed by value.
#include "kernels/cuda/optimizer.h"

#include <cmath>

#include "kernels/cuda/for_each.cuh"

namespace pt::cuda {

namespace {

// Each element reads param[i] before it writes param_out[i], so param_out may be param.

// momentum == 0: p_out = p - lr (g + wd p).
struct SgdPlainOp {
  const float* param;
  const float* grad;
  float* param_out;
  float lr, wd;
  __device__ void operator()(int64_t i) const {
    const float w = param[i];
    param_out[i] = w - mul(lr, grad[i] + mul(wd, w));
  }
};

// g = grad + wd p; buf = first ? g : momentum buf + (1 - dampening) g;
// p_out = p - lr (nesterov ? g + momentum buf : buf).
struct SgdMomentumOp {
  const float* param;
  const float* grad;
  float* param_out;
  float* buf;
  float lr, wd, momentum, one_minus_dampening;
  bool first_step, nesterov;
  __device__ void operator()(int64_t i) const {
    const float w = param[i];
    const float g = grad[i] + mul(wd, w);
    const float b = first_step ? g : mul(momentum, buf[i]) + mul(one_minus_dampening, g);
    buf[i] = b;
    param_out[i] = w - mul(lr, nesterov ? g + mul(momentum, b) : b);
  }
};

// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p_out = p (1 - lr wd) - step_size m / (sqrt(v) / bc2_sqrt + eps).
struct AdamWOp {
  const float* param;
  const float* grad;
  float* param_out;
  float* m;
  float* v;
  float decay, step_size, bc2_sqrt, b1, b2, c1, c2, eps;
  bool nesterov;           // the look-ahead form (AdamWParams::nesterov)
  float ahead_m, ahead_g;  // its factors of m and g
  __device__ void operator()(int64_t i) const {
    const float g = grad[i];
    const float mi = mul(b1, m[i]) + mul(c1, g);
    const float vi = mul(b2, v[i]) + mul(c2, mul(g, g));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fdiv_rn(__fsqrt_rn(vi), bc2_sqrt) + eps;
    if (nesterov)
      param_out[i] = mul(param[i], decay) - __fdiv_rn(mul(ahead_m, mi) + mul(ahead_g, g), denom);
    else
      param_out[i] = mul(param[i], decay) - mul(step_size, __fdiv_rn(mi, denom));
  }
};

}  // namespace

cudaError_t launch_sgd_update(const float* param, const float* grad, float* param_out,
                              float* momentum_buf, int64_t n, const SgdParams& p,
                              cudaStream_t stream) {
  if (p.momentum == 0.f)
    return launch_for_each(n, SgdPlainOp{param, grad, param_out, p.lr, p.weight_decay}, stream);
  if (momentum_buf == nullptr) return cudaErrorInvalidValue;
  const SgdMomentumOp op{.param = param,
                         .grad = grad,
                         .param_out = param_out,
                         .buf = momentum_buf,
                         .lr = p.lr,
                         .wd = p.weight_decay,
                         .momentum = p.momentum,
                         .one_minus_dampening = 1.f - p.dampening,
                         .first_step = p.first_step,
                         .nesterov = p.nesterov};
  return launch_for_each(n, op, stream);
}

cudaError_t launch_adamw_update(const float* param, const float* grad, float* param_out, float* m,
                                float* v, int64_t n, const AdamWParams& p, cudaStream_t stream) {
  if (p.step < 1) return cudaErrorInvalidValue;
  // Host scalars exactly as CpuBackend::adamw_update computes them (double, then float).
  const double t = static_cast<double>(p.step);
  const AdamWOp op{
      .param = param,
      .grad = grad,
      .param_out = param_out,
      .m = m,
      .v = v,
      .decay = static_cast<float>(1.0 - static_cast<double>(p.lr) * p.weight_decay),
      .step_size = static_cast<float>(p.lr / (1.0 - std::pow(static_cast<double>(p.beta1), t))),
      .bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(p.beta2), t))),
      .b1 = p.beta1,
      .b2 = p.beta2,
      .c1 = 1.f - p.beta1,
      .c2 = 1.f - p.beta2,
      .eps = p.eps,
      .nesterov = p.nesterov,
      .ahead_m = static_cast<float>(p.lr * static_cast<double>(p.beta1) /
                                    (1.0 - std::pow(static_cast<double>(p.beta1), t + 1))),
      .ahead_g = static_cast<float>(p.lr * (1.0 - static_cast<double>(p.beta1)) /
                                    (1.0 - std::pow(static_cast<double>(p.beta1), t)))};
  return launch_for_each(n, op, stream);
}

}  // namespace pt::cuda
