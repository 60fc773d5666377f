#pragma once
// Flatten and Reshape: the same memory seen with another per-sample shape (no copy).
//   Flatten:  x (B, ...in) -> y (B, numel(in));   dx = dy reshaped back.
//   Reshape:  x (B, ...in) -> y (B, ...out), numel(out) == numel(in).
#include <string_view>

#include "layers/layer.h"

namespace pt {

class Reshape : public Layer {
 public:
  static constexpr std::string_view kKind = "reshape";

  // Throws ShapeError when a size is not positive or the element counts differ.
  Reshape(Shape in, Shape out);

  std::string_view kind() const override { return kKind; }
  LayerCost cost() const override { return {}; }

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;

 protected:
  Reshape(std::string_view kind, Shape in, Shape out);
};

class Flatten final : public Reshape {
 public:
  static constexpr std::string_view kKind = "flatten";

  explicit Flatten(Shape in);

  std::string_view kind() const override { return kKind; }
};

}  // namespace pt
