#include "layers/reshape.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"

namespace pt {

namespace {

void check_dims(std::string_view kind, std::string_view what, const Shape& s) {
  for (int64_t d : s)
    if (d <= 0)
      throw ShapeError(
          fmt::format("{}: every {} dimension must be positive but got {}", kind, what, s.str()));
}

}  // namespace

Reshape::Reshape(std::string_view kind, Shape in, Shape out) : Layer(std::string(kind), in) {
  check_dims(kind, "input", in);
  check_dims(kind, "output", out);
  if (in.numel() != out.numel())
    throw ShapeError(fmt::format("{}: cannot reshape {} ({} elements) to {} ({} elements)", kind,
                                 in.str(), in.numel(), out.str(), out.numel()));
  output_shape_ = out;
}

Reshape::Reshape(Shape in, Shape out) : Reshape(kKind, in, out) {}

Flatten::Flatten(Shape in) : Reshape(kKind, in, Shape{in.numel()}) {}

Tensor Reshape::forward(const Tensor& x, LayerContext& ctx) {
  (void)ctx;
  const int64_t B = check_batched(*this, "input", x, input_shape_);
  return x.reshape(output_shape_.with_batch(B));
}

Tensor Reshape::backward_input(const Tensor& dy, LayerContext& ctx) {
  (void)ctx;
  const int64_t B = check_batched(*this, "gradient", dy, output_shape_);
  return dy.reshape(input_shape_.with_batch(B));
}

}  // namespace pt
