#include "layers/skip.h"

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

namespace {

const Tensor& entry(const std::map<std::string, Tensor>& board, const std::string& name,
                    std::string_view what) {
  const auto it = board.find(name);
  if (it == board.end() || !it->second.defined())
    throw std::logic_error(
        fmt::format("skip '{}': no {} on this micro-batch's board (the runtime did not deliver it)",
                    name, what));
  return it->second;
}

}  // namespace

SaveActivation::SaveActivation(Shape in, std::string skip_name)
    : Layer(std::string(kKind), in), skip_(std::move(skip_name)) {
  if (skip_.empty()) throw ShapeError("save: the skip needs a name");
  output_shape_ = in;
}

Tensor SaveActivation::forward(const Tensor& x, LayerContext& ctx) {
  ctx.skips().activations[skip_] = x;  // a view: nobody writes x afterwards
  return x;
}

Tensor SaveActivation::backward_input(const Tensor& dy, LayerContext& ctx) {
  SkipBoard& board = ctx.skips();
  const Tensor& from_skip = entry(board.gradients, skip_, "gradient from add_saved");
  if (from_skip.shape() != dy.shape())
    throw std::logic_error(fmt::format("skip '{}': gradient {} but dy {}", skip_,
                                       from_skip.shape().str(), dy.shape().str()));
  Tensor dx = ctx.alloc(dy.shape());
  ctx.backend().add(dy.f32(), from_skip.f32(), dx.f32(), dy.numel());
  board.gradients.erase(skip_);
  return dx;
}

AddSaved::AddSaved(Shape in, std::string skip_name)
    : Layer(std::string(kKind), in), skip_(std::move(skip_name)) {
  if (skip_.empty()) throw ShapeError("add_saved: the skip needs a name");
  output_shape_ = in;
}

LayerCost AddSaved::cost() const {
  LayerCost c;
  c.forward_flops = static_cast<double>(input_shape_.numel());
  return c;
}

Tensor AddSaved::forward(const Tensor& x, LayerContext& ctx) {
  const Tensor& saved = entry(ctx.skips().activations, skip_, "activation from save");
  if (saved.shape() != x.shape())
    throw ShapeError(fmt::format("add_saved '{}': the saved activation is {} but the input is {}",
                                 skip_, saved.shape().str(), x.shape().str()));
  Tensor y = ctx.alloc(x.shape());
  ctx.backend().add(x.f32(), saved.f32(), y.f32(), x.numel());
  return y;
}

Tensor AddSaved::backward_input(const Tensor& dy, LayerContext& ctx) {
  ctx.skips().gradients[skip_] = dy;  // d(saved) = dy, handed to SaveActivation
  return dy;
}

}  // namespace pt
