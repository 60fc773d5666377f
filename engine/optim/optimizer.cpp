#include "engine/optim/optimizer.h"

#include <stdexcept>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/option_range.h"

namespace pt {

// A learning rate or weight decay above this trains nothing: typical values are 1e-5..1, and
// 1e3 x a gradient already leaves float's useful range within a few steps. The bound catches
// 1e30 and inf (a typo, a unit mistake) before any work, with a message, instead of NaN weights.
constexpr double kMaxLr = 1e3;

void OptimizerConfig::validate() const {
  if (kind != "sgd" && kind != "adamw")
    throw UsageError(fmt::format("unknown optimizer '{}': use sgd or adamw", kind));
  check_real("--lr", lr, {.lo = 0, .lo_open = true, .hi = kMaxLr});
  check_real("--momentum", momentum, {.lo = 0, .hi = 1, .hi_open = true}, "0: plain SGD");
  check_real("dampening", dampening, {.lo = 0, .hi = 1});
  if (kind == "sgd" && nesterov && (momentum <= 0.f || dampening != 0.f))
    throw UsageError("Nesterov momentum requires momentum > 0 and dampening = 0");
  check_real("--weight-decay", weight_decay, {.lo = 0, .hi = kMaxLr}, "0: off");
  if (!(beta1 >= 0.f && beta1 < 1.f && beta2 >= 0.f && beta2 < 1.f))
    throw UsageError(fmt::format("AdamW betas ({}, {}) must be in [0, 1)", beta1, beta2));
  check_real("AdamW eps", eps, {.lo = 0, .lo_open = true, .hi = 1});
}

std::string OptimizerConfig::str() const {
  if (kind == "adamw")
    return fmt::format("adamw(lr={}, betas=({}, {}), eps={}, weight_decay={}{})", lr, beta1, beta2,
                       eps, weight_decay, nesterov ? ", nesterov=true" : "");
  return fmt::format("sgd(lr={}, momentum={}, dampening={}, nesterov={}, weight_decay={})", lr,
                     momentum, dampening, nesterov, weight_decay);
}

int OptimizerConfig::state_slots() const {
  if (kind == "sgd") return momentum > 0.f ? 1 : 0;
  return 2;
}

Optimizer::Optimizer(const OptimizerConfig& config, Backend& backend, const SizeTable& layout)
    : config_(config), backend_(&backend) {
  config_.validate();
  if (config_.kind == "sgd") {
    if (config_.momentum > 0.f) slots_.push_back({"momentum_buffer", Arena(backend, layout)});
  } else {
    slots_.push_back({"exp_avg", Arena(backend, layout)});
    slots_.push_back({"exp_avg_sq", Arena(backend, layout)});
  }
}

void Optimizer::step(const Tensor& params_flat, const Tensor& grads_flat, const Tensor& params_out,
                     float lr) {
  const int64_t n = params_flat.numel();
  if (params_out.numel() != n || grads_flat.numel() != n)
    throw std::logic_error(
        fmt::format("Optimizer::step: {} parameters, {} gradients and {} outputs; all must match",
                    n, grads_flat.numel(), params_out.numel()));
  ++steps_;
  if (n == 0) return;
  if (config_.kind == "sgd") {
    SgdParams p;
    p.lr = lr;
    p.momentum = config_.momentum;
    p.dampening = config_.dampening;
    p.weight_decay = config_.weight_decay;
    p.nesterov = config_.nesterov;
    p.first_step = steps_ == 1;
    float* buf = slots_.empty() ? nullptr : slots_[0].state.flat().f32();
    backend_->sgd_update(params_flat.f32(), grads_flat.f32(), params_out.f32(), buf, n, p);
  } else {
    AdamWParams p;
    p.lr = lr;
    p.beta1 = config_.beta1;
    p.beta2 = config_.beta2;
    p.eps = config_.eps;
    p.weight_decay = config_.weight_decay;
    p.step = steps_;
    p.nesterov = config_.nesterov;
    backend_->adamw_update(params_flat.f32(), grads_flat.f32(), params_out.f32(),
                           slots_[0].state.flat().f32(), slots_[1].state.flat().f32(), n, p);
  }
}

float clip_factor(double norm, float max_norm) {
  if (max_norm <= 0.f || norm <= static_cast<double>(max_norm)) return 1.f;
  return static_cast<float>(static_cast<double>(max_norm) / (norm + 1e-6));
}

}  // namespace pt
