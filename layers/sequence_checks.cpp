#include "layers/sequence_checks.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"

namespace pt {

SequenceDims check_sequence(const Layer& layer, std::string_view what, const Tensor& x,
                            int64_t context, int64_t channels) {
  if (!x.defined() && x.numel() != 0)
    throw UsageError(fmt::format("{}: {} tensor is undefined", layer_label(layer), what));
  const Shape& s = x.shape();
  if (s.rank() != 3 || s[2] != channels || s[1] < 1 || s[1] > context)
    throw ShapeError(
        fmt::format("{}: expects {} (B, T, {}) with 1 <= T <= {} (the context it was "
                    "built for) but got {}",
                    layer_label(layer), what, channels, context, s.str()));
  if (x.dtype() != DType::f32)
    throw ShapeError(fmt::format("{}: expects {} of type {} but got {}", layer_label(layer), what,
                                 dtype_name(DType::f32), dtype_name(x.dtype())));
  return {s[0], s[1]};
}

void require_same_dims(const Layer& layer, const Shape& gradient, const Shape& forward_input) {
  if (gradient != forward_input)
    throw ShapeError(
        fmt::format("{}: the gradient is {} but forward ran on {}; backward needs the "
                    "gradient of that same forward",
                    layer_label(layer), gradient.str(), forward_input.str()));
}

}  // namespace pt
