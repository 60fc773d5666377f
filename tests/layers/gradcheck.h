#pragma once
// Test helpers for layers: host <-> device copies, random tensors, parameter binding, and a
// finite-difference gradient checker.
//
// The checker compares backward_input's dx and backward_weight's dW against central
// differences of the scalar L = sum(y * dy) (dy fixed and random), in fp32 forward passes with
// L accumulated in double:  numeric_i = (L(v_i + eps) - L(v_i - eps)) / (2 eps).
// An element passes when |analytic - numeric| <= atol + rtol |numeric|.
// Because the CPU backend is deterministic, outputs that do not depend on v_i are bit-identical
// in both passes and cancel exactly; the noise left is the rounding of the few outputs that
// do, so the tolerances can be tight (see kExact and kSmooth).
//
// Gradients are bound pre-filled with random values G0 and dW is read as (grad - G0): a layer
// that assigns instead of accumulating fails. The checker also fails a layer whose
// backward_input touches the parameter gradients.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/backend.h"
#include "layers/layer.h"

namespace pt::test {

// The CPU backend all layer tests share (cpu:0, 1 thread).
Backend& backend();

// ---- host <-> device ------------------------------------------------------------------------
Tensor to_device(Backend& be, const std::vector<float>& host, const Shape& shape);
Tensor to_device_i32(Backend& be, const std::vector<int32_t>& host, const Shape& shape);
std::vector<float> to_host(Backend& be, const Tensor& t);
std::vector<int32_t> to_host_i32(Backend& be, const Tensor& t);

// n values uniform in [lo, hi) from a fixed seed.
std::vector<float> random_uniform(uint64_t seed, int64_t n, float lo = -1.f, float hi = 1.f);
// n values with |v| in [min_abs, 1) and a random sign: keeps ReLU away from its kink.
std::vector<float> random_away_from_zero(uint64_t seed, int64_t n, float min_abs = 0.1f);
// n distinct values spaced `gap` apart in random order: keeps max-pool windows free of ties.
std::vector<float> random_distinct(uint64_t seed, int64_t n, float gap = 0.05f);
// n ids uniform in [0, vocab).
std::vector<int32_t> random_ids(uint64_t seed, int64_t n, int64_t vocab);

// Allocates each of the layer's parameters and gradients from the backend (backend.zeros),
// fills the parameters uniformly in [-scale, scale) and the gradients with `grad_fill`
// (random when grad_random, else zeros), and binds them.
struct BoundParams {
  std::vector<Tensor> params, grads;
};
BoundParams bind_random(Layer& layer, Backend& be, uint64_t seed, float scale = 0.5f,
                        bool grad_random = true);

// ---- finite differences -----------------------------------------------------------------------
struct Tolerance {
  float eps;    // the perturbation
  double atol;  // |a - b| <= atol + rtol |numeric|
  double rtol;
};
// For functions linear in the checked value (Linear, Conv2d, pools, dropout, reshape,
// embedding, and every weight gradient of those): only rounding separates the two sides.
// Measured worst |diff|/tol on the tests here: 0.18 (conv2d dW).
inline constexpr Tolerance kExact{1e-2f, 5e-5, 5e-4};
// For smooth non-linear functions (GELU, tanh, LayerNorm, softmax, residual blocks): central
// differences add a truncation error of order eps^2 f''' / 6. Measured worst: ~0.05.
inline constexpr Tolerance kSmooth{1e-2f, 2e-4, 2e-3};

struct GradReport {
  int64_t checked = 0;
  int64_t failures = 0;
  double worst = 0;  // max over elements of |a - b| / (atol + rtol |numeric|); < 1 passes
  std::string text;  // per tensor: checked count, worst ratio, the first failures
  bool ok() const { return failures == 0 && checked > 0; }
};

struct GradcheckOptions {
  Tolerance tol = kSmooth;
  uint64_t seed = 1;             // for dy (and for the parameters)
  float param_scale = 0.5f;      // parameters uniform in [-param_scale, param_scale)
  bool check_input = true;       // false for integer inputs (embedding ids)
  int64_t max_per_tensor = 400;  // elements checked per tensor (a fixed random subset beyond)
};

// Binds random parameters to `layer`, runs forward / backward_input / backward_weight on x
// (B, ...input_shape) in training mode, and compares dx and every dW with central differences.
GradReport gradcheck_layer(Layer& layer, const Tensor& x, const GradcheckOptions& opt = {});

// Same for a loss: d(loss share)/d(prediction) against differences of loss.forward.
GradReport gradcheck_loss(Loss& loss, const Tensor& prediction, const Tensor& target,
                          int64_t global_batch, const GradcheckOptions& opt = {});

// The StepInfo every checker pass uses (training, fixed seed/step/micro-batch).
const StepInfo& check_step_info();

}  // namespace pt::test
