#include "layers/dropout.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/random.h"
#include "layers/layer_checks.h"

namespace pt {

Dropout::Dropout(Shape in, float p) : Layer(std::string(kKind), in), p_(p) {
  if (!(p >= 0.f && p < 1.f))
    throw ShapeError(fmt::format("dropout: p must be in [0, 1) but got {}", p));
  require_positive(kKind, "input size", in.numel());
  output_shape_ = in;
}

LayerCost Dropout::cost() const {
  const double n = static_cast<double>(input_shape_.numel());
  LayerCost c;
  c.forward_flops = p_ > 0.f ? 2.0 * n : 0.0;  // hash compare + scale per element
  c.backward_input_flops = c.forward_flops;
  c.activation_bytes = 0;  // the mask is recomputed from its key
  return c;
}

uint64_t Dropout::mask_key(const LayerContext& ctx) {
  const StepInfo& s = ctx.info();
  uint64_t k = hash_keys(s.seed, static_cast<uint64_t>(s.step));
  k = hash_keys(k, static_cast<uint64_t>(s.microbatch));
  return hash_keys(k, ctx.key());
}

Tensor Dropout::forward(const Tensor& x, LayerContext& ctx) {
  const int64_t B = check_batched(*this, "input", x, input_shape_);
  if (!active(ctx)) return x;
  Tensor y = ctx.alloc(output_shape_.with_batch(B));
  ctx.backend().dropout_forward(x.f32(), y.f32(), x.numel(), p_, mask_key(ctx));
  return y;
}

Tensor Dropout::backward_input(const Tensor& dy, LayerContext& ctx) {
  const int64_t B = check_batched(*this, "gradient", dy, output_shape_);
  if (!active(ctx)) return dy;
  Tensor dx = ctx.alloc(input_shape_.with_batch(B));
  ctx.backend().dropout_backward(dy.f32(), dx.f32(), dy.numel(), p_, mask_key(ctx));
  return dx;
}

}  // namespace pt
