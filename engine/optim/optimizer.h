#pragma once
// Optimizers with PyTorch semantics (torch.optim.SGD and torch.optim.AdamW), applied to a
// stage's flat parameter arena in one fused backend call. State (momentum buffers, Adam
// moments) lives in arenas with the parameters' layout, so checkpoints can name each slot per
// parameter ("{param name}.{slot}").
#include <string>
#include <vector>

#include "engine/core/arena.h"

namespace pt {

struct OptimizerConfig {
  std::string kind = "sgd";  // "sgd" | "adamw"
  float lr = 0.05f;          // base learning rate (the LR schedule scales it per step)
  float momentum = 0.9f;     // sgd
  float dampening = 0.f;     // sgd
  bool nesterov = false;     // sgd: Nesterov's momentum; adamw: its look-ahead (op_params.h)
  float weight_decay = 0.f;  // sgd: L2 added to the gradient; adamw: decoupled
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adamw

  // Throws UsageError naming the bad setting by its flag (unknown kind, --lr not in (0, 1e3],
  // --momentum not in [0, 1), --weight-decay not in [0, 1e3], nesterov without momentum, betas
  // outside [0, 1), anything not finite, ...).
  void validate() const;
  std::string str() const;  // "sgd(momentum=0.9, nesterov=false, weight_decay=0)"
  // State tensors per parameter (each the size of the parameters): SGD 0, SGD with momentum 1,
  // AdamW 2. The partitioner's memory estimate counts them.
  int state_slots() const;
};

struct OptimizerSlot {
  std::string name;  // "momentum_buffer" | "exp_avg" | "exp_avg_sq" (PyTorch's names)
  Arena state;
};

class Optimizer {
 public:
  Optimizer(const OptimizerConfig& config, Backend& backend, const SizeTable& layout);

  // One update of params from grads (both flat arenas with `layout`) at learning rate lr.
  void step(const Tensor& params_flat, const Tensor& grads_flat, float lr) {
    step(params_flat, grads_flat, params_flat, lr);
  }
  // The same update written to params_out (another arena with `layout`), params left as they
  // were: the same bits as the in-place step, without first copying params there.
  void step(const Tensor& params_flat, const Tensor& grads_flat, const Tensor& params_out,
            float lr);

  const OptimizerConfig& config() const { return config_; }
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  std::vector<OptimizerSlot>& slots() { return slots_; }
  const std::vector<OptimizerSlot>& slots() const { return slots_; }

 private:
  OptimizerConfig config_;
  Backend* backend_;
  std::vector<OptimizerSlot> slots_;
  int64_t steps_ = 0;
};

// Scales grads so that their global L2 norm is at most max_norm (PyTorch's clip_grad_norm_:
// factor max_norm / (norm + 1e-6) when norm > max_norm). `norm` is the global norm computed by
// the caller (over every stage). Returns the factor applied (1 when not clipped).
float clip_factor(double norm, float max_norm);

}  // namespace pt
