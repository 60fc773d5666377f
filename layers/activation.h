#pragma once
// Elementwise activations, any shape: x (B, ...) -> y (B, ...).
//   relu       y = max(x, 0)                               dx = dy * [x > 0]
//   gelu       y = x * Phi(x) (erf form, PyTorch default)   dx = dy * (Phi(x) + x phi(x))
//   gelu_tanh  y = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))  (approximate='tanh')
//   tanh       y = tanh(x)                                  dx = dy * (1 - y^2)
// Saves only what backward reads: x for relu and the gelus, y for tanh.
#include <memory>
#include <string_view>

#include "layers/layer.h"

namespace pt {

// "relu", "gelu", "gelu_tanh", "tanh" (the layer kinds).
std::string_view activation_kind(Activation f);

class ActivationLayer final : public Layer {
 public:
  ActivationLayer(Shape in, Activation f);

  std::string_view kind() const override { return activation_kind(f_); }
  Activation function() const { return f_; }
  LayerCost cost() const override;

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;

 protected:
  // Element-wise: runs as it is on a tensor-parallel slice of the features.
  std::unique_ptr<Layer> rebuilt_for(const Shape& in) const override {
    return std::make_unique<ActivationLayer>(in, f_);
  }

 private:
  bool saves_output() const { return f_ == Activation::tanh; }
  Activation f_;
};

}  // namespace pt
