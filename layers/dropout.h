#pragma once
// Inverted dropout, any shape: x (B, ...) -> y (B, ...).
//   training: y_i = x_i * m_i / (1 - p), m_i = [uniform(key, i) >= p];  dx_i = dy_i * m_i / (1 - p)
//   evaluation, or p == 0: y = x (the same tensor), nothing saved, dx = dy.
// key = hash(seed, step, micro-batch, layer key), so the mask is a pure function of where the
// layer is in training: backward recomputes it (nothing is saved) and recomputation reproduces
// it. The StepInfo that the context points to must therefore be the same in forward and
// backward of one micro-batch.
#include <cstdint>
#include <string_view>

#include "layers/layer.h"

namespace pt {

class Dropout final : public Layer {
 public:
  static constexpr std::string_view kKind = "dropout";

  Dropout(Shape in, float p);  // throws ShapeError for p outside [0, 1)

  std::string_view kind() const override { return kKind; }
  float p() const { return p_; }
  LayerCost cost() const override;

  // The mask's key for this context: hash of (seed, step, micro-batch, ctx.key()).
  static uint64_t mask_key(const LayerContext& ctx);

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;

 private:
  bool active(const LayerContext& ctx) const { return ctx.info().training && p_ > 0.f; }
  float p_;
};

}  // namespace pt
