#include "layers/conv2d.h"

#include <cmath>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"

namespace pt {

Conv2d::Conv2d(Shape in, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
               bool bias)
    : Layer(std::string(kKind), in),
      K_(out_channels),
      k_(kernel),
      stride_(stride),
      pad_(padding),
      bias_(bias) {
  require_rank(kKind, in, 3, "(C, H, W)");
  require_positive(kKind, "input size", in.numel());
  require_positive(kKind, "out_channels", K_);
  require_positive(kKind, "kernel", k_);
  require_positive(kKind, "stride", stride_);
  if (pad_ < 0) throw ShapeError(fmt::format("conv2d: padding must be >= 0 but got {}", pad_));
  if (in[1] + 2 * pad_ < k_ || in[2] + 2 * pad_ < k_)
    throw ShapeError(fmt::format(
        "conv2d: kernel {} is larger than the padded input {} (H, W = {}, {} with padding {})", k_,
        in.str(), in[1] + 2 * pad_, in[2] + 2 * pad_, pad_));
  output_shape_ =
      Shape{K_, (in[1] + 2 * pad_ - k_) / stride_ + 1, (in[2] + 2 * pad_ - k_) / stride_ + 1};
}

Conv2dShape Conv2d::op_shape(int64_t B) const {
  return Conv2dShape{
      B,    input_shape_[0],  input_shape_[1], input_shape_[2], K_, k_, k_, stride_, stride_, pad_,
      pad_, output_shape_[1], output_shape_[2]};
}

std::vector<ParamSpec> Conv2d::param_specs() const {
  const float bound = 1.f / std::sqrt(static_cast<float>(input_shape_[0] * k_ * k_));
  std::vector<ParamSpec> specs{
      {"weight", Shape{K_, input_shape_[0], k_, k_}, ParamInit::uniform(bound)}};
  if (bias_) specs.push_back({"bias", Shape{K_}, ParamInit::uniform(bound)});
  return specs;
}

LayerCost Conv2d::cost() const {
  // One multiply-add per (output element, c, r, s), as if no output reads padding.
  const double macs = static_cast<double>(output_shape_.numel() * input_shape_[0] * k_ * k_);
  LayerCost c;
  c.forward_flops = 2.0 * macs;
  c.backward_input_flops = 2.0 * macs;
  c.backward_weight_flops = 2.0 * macs;
  c.activation_bytes = input_shape_.numel() * 4;  // x
  return c;
}

// ---- forward -------------------------------------------------------------------------------
Tensor Conv2d::forward(const Tensor& x, LayerContext& ctx) {
  const int64_t B = check_batched(*this, "input", x, input_shape_);
  require_bound(*this);
  Tensor y = ctx.alloc(output_shape_.with_batch(B));
  ctx.backend().conv2d_forward(op_shape(B), x.f32(), params_[0].f32(),
                               bias_ ? params_[1].f32() : nullptr, y.f32());
  if (ctx.info().training) ctx.save(x);
  return y;
}

// ---- backward ------------------------------------------------------------------------------
Tensor Conv2d::backward_input(const Tensor& dy, LayerContext& ctx) {
  const int64_t B = check_batched(*this, "gradient", dy, output_shape_);
  require_bound(*this);
  Tensor dx = ctx.alloc(input_shape_.with_batch(B));
  ctx.backend().conv2d_backward_input(op_shape(B), dy.f32(), params_[0].f32(), dx.f32());
  return dx;
}

void Conv2d::backward_weight(const Tensor& dy, LayerContext& ctx) {
  const int64_t B = check_batched(*this, "gradient", dy, output_shape_);
  require_bound(*this);
  const Tensor& x = saved_or_throw(*this, ctx, 0);
  // dW += ..., db += ... (the op accumulates)
  ctx.backend().conv2d_backward_weight(op_shape(B), dy.f32(), x.f32(), grads_[0].f32(),
                                       bias_ ? grads_[1].f32() : nullptr);
}

}  // namespace pt
