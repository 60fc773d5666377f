#pragma once
// Residual block: y = x + body(x), body a chain of layers whose output shape equals its input.
//   x (B, ...in) -> y (B, ...in)
// Backward (g_i = the gradient flowing into body layer i, g_{n-1} = dy):
//   g_{i-1} = body_i.backward_input(g_i);   dx = dy + body_0.backward_input(g_0)
//   backward_weight: body_i.backward_weight(g_i) for every i.
// Zero-bubble schedules run backward_weight long after backward_input, so backward_input keeps
// g_0 .. g_{n-2} in this layer's context (its own saved slots; forward saves nothing here) and
// backward_weight reads them back. Each body layer i uses ctx.child(i).
// Parameters are the body's, named "<i>.<name>" ("0.weight", "2.bias").
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "layers/layer.h"

namespace pt {

class Residual final : public Layer {
 public:
  static constexpr std::string_view kKind = "residual";

  // Throws ShapeError when the body is empty, its shapes do not chain, its first layer does not
  // take f32, or its output shape differs from `in`.
  Residual(Shape in, std::vector<std::unique_ptr<Layer>> body);

  std::string_view kind() const override { return kKind; }
  const std::vector<std::unique_ptr<Layer>>& body() const { return body_; }

  std::vector<ParamSpec> param_specs() const override;
  LayerCost cost() const override;
  // Checks like Layer::bind, then gives each body layer its slice of params and grads.
  void bind(std::span<const Tensor> params, std::span<const Tensor> grads) override;
  void unbind() override;

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;
  void backward_weight(const Tensor& dy, LayerContext& ctx) override;
  void complete_gradients(Backend& backend) override;

 private:
  std::vector<std::unique_ptr<Layer>> body_;
};

}  // namespace pt
