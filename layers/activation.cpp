#include "layers/activation.h"

#include "layers/layer_checks.h"

namespace pt {

std::string_view activation_kind(Activation f) {
  switch (f) {
    case Activation::relu: return "relu";
    case Activation::gelu_erf: return "gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::tanh: return "tanh";
  }
  return "activation";
}

ActivationLayer::ActivationLayer(Shape in, Activation f)
    : Layer(std::string(activation_kind(f)), in), f_(f) {
  require_positive(activation_kind(f), "input size", in.numel());
  output_shape_ = in;
}

LayerCost ActivationLayer::cost() const {
  // Rough elementwise counts: relu 1 op per element, the others ~10 (erf/tanh and polynomial).
  const double n = static_cast<double>(input_shape_.numel());
  const double per = f_ == Activation::relu ? 1.0 : 10.0;
  LayerCost c;
  c.forward_flops = per * n;
  c.backward_input_flops = (per + 1.0) * n;
  c.activation_bytes = input_shape_.numel() * 4;  // x, or y for tanh
  return c;
}

Tensor ActivationLayer::forward(const Tensor& x, LayerContext& ctx) {
  const int64_t B = check_batched(*this, "input", x, input_shape_);
  Tensor y = ctx.alloc(output_shape_.with_batch(B));
  ctx.backend().activation_forward(f_, x.f32(), y.f32(), x.numel());
  if (ctx.info().training) ctx.save(saves_output() ? y : x);
  return y;
}

Tensor ActivationLayer::backward_input(const Tensor& dy, LayerContext& ctx) {
  const int64_t B = check_batched(*this, "gradient", dy, output_shape_);
  const Tensor& saved = saved_or_throw(*this, ctx, 0);
  Tensor dx = ctx.alloc(input_shape_.with_batch(B));
  // The op reads x (relu, gelu) or y (tanh); the one not saved is passed as null.
  const float* x = saves_output() ? nullptr : saved.f32();
  const float* y = saves_output() ? saved.f32() : nullptr;
  ctx.backend().activation_backward(f_, x, y, dy.f32(), dx.f32(), dy.numel());
  return dx;
}

}  // namespace pt
