#include "layers/pool.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"

namespace pt {

Pool2d::Pool2d(std::string_view kind, Shape in, int64_t kernel, int64_t stride, int64_t padding)
    : Layer(std::string(kind), in),
      k_(kernel),
      stride_(stride == 0 ? kernel : stride),
      pad_(padding) {
  require_rank(kind, in, 3, "(C, H, W)");
  require_positive(kind, "input size", in.numel());
  require_positive(kind, "kernel", k_);
  require_positive(kind, "stride", stride_);
  if (pad_ < 0 || 2 * pad_ > k_)
    throw ShapeError(fmt::format("{}: padding must be in [0, kernel / 2] = [0, {}] but got {}",
                                 kind, k_ / 2, pad_));
  if (in[1] + 2 * pad_ < k_ || in[2] + 2 * pad_ < k_)
    throw ShapeError(
        fmt::format("{}: kernel {} is larger than the padded input {} (H, W = {}, {} "
                    "with padding {})",
                    kind, k_, in.str(), in[1] + 2 * pad_, in[2] + 2 * pad_, pad_));
  output_shape_ =
      Shape{in[0], (in[1] + 2 * pad_ - k_) / stride_ + 1, (in[2] + 2 * pad_ - k_) / stride_ + 1};
}

Pool2dShape Pool2d::op_shape(int64_t B) const {
  return Pool2dShape{
      B,    input_shape_[0],  input_shape_[1], input_shape_[2], k_, k_, stride_, stride_, pad_,
      pad_, output_shape_[1], output_shape_[2]};
}

LayerCost Pool2d::cost() const {
  // One compare or add per window element; backward touches each output once.
  const double out = static_cast<double>(output_shape_.numel());
  LayerCost c;
  c.forward_flops = out * static_cast<double>(k_ * k_);
  c.backward_input_flops =
      static_cast<double>(input_shape_.numel()) + out * static_cast<double>(k_ * k_);
  c.activation_bytes = 0;
  return c;
}

// ---- max -----------------------------------------------------------------------------------
MaxPool2d::MaxPool2d(Shape in, int64_t kernel, int64_t stride, int64_t padding)
    : Pool2d(kKind, in, kernel, stride, padding) {}

LayerCost MaxPool2d::cost() const {
  LayerCost c = Pool2d::cost();
  c.backward_input_flops = static_cast<double>(input_shape_.numel() + output_shape_.numel());
  c.activation_bytes = output_shape_.numel() * 4;  // argmax, int32
  return c;
}

Tensor MaxPool2d::forward(const Tensor& x, LayerContext& ctx) {
  const int64_t B = check_batched(*this, "input", x, input_shape_);
  Tensor y = ctx.alloc(output_shape_.with_batch(B));
  Tensor argmax = ctx.alloc(output_shape_.with_batch(B), DType::i32);
  ctx.backend().maxpool2d_forward(op_shape(B), x.f32(), y.f32(), argmax.i32());
  if (ctx.info().training) ctx.save(argmax);
  return y;
}

Tensor MaxPool2d::backward_input(const Tensor& dy, LayerContext& ctx) {
  const int64_t B = check_batched(*this, "gradient", dy, output_shape_);
  const Tensor& argmax = saved_or_throw(*this, ctx, 0);
  Tensor dx = ctx.alloc(input_shape_.with_batch(B));
  ctx.backend().maxpool2d_backward(op_shape(B), dy.f32(), argmax.i32(), dx.f32());
  return dx;
}

// ---- average -------------------------------------------------------------------------------
AvgPool2d::AvgPool2d(Shape in, int64_t kernel, int64_t stride, int64_t padding)
    : Pool2d(kKind, in, kernel, stride, padding) {}

Tensor AvgPool2d::forward(const Tensor& x, LayerContext& ctx) {
  const int64_t B = check_batched(*this, "input", x, input_shape_);
  Tensor y = ctx.alloc(output_shape_.with_batch(B));
  ctx.backend().avgpool2d_forward(op_shape(B), x.f32(), y.f32());
  return y;
}

Tensor AvgPool2d::backward_input(const Tensor& dy, LayerContext& ctx) {
  const int64_t B = check_batched(*this, "gradient", dy, output_shape_);
  Tensor dx = ctx.alloc(input_shape_.with_batch(B));
  ctx.backend().avgpool2d_backward(op_shape(B), dy.f32(), dx.f32());
  return dx;
}

}  // namespace pt
