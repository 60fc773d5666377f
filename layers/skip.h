#pragma once
// Skip connections across any distance (U-Net style): SaveActivation("x") marks an activation,
// AddSaved("x") later adds it to its own input. In a pipeline the saved activation goes straight
// from the stage that saves it to the stage that adds it (and its gradient straight back),
// without passing through the stages between (see engine/pipeline). Both use the micro-batch's
// SkipBoard (LayerContext::skips()).
//   SaveActivation: y = x (forward), dx = dy + d(saved)       (the gradient AddSaved sent back)
//   AddSaved:       y = x + saved,   dx = dy, d(saved) = dy
#include <string>
#include <string_view>

#include "layers/layer.h"

namespace pt {

class SaveActivation final : public Layer {
 public:
  static constexpr std::string_view kKind = "save";
  SaveActivation(Shape in, std::string skip_name);

  std::string_view kind() const override { return kKind; }
  const std::string& skip_name() const { return skip_; }
  LayerCost cost() const override { return {}; }
  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;

 private:
  std::string skip_;
};

class AddSaved final : public Layer {
 public:
  static constexpr std::string_view kKind = "add_saved";
  AddSaved(Shape in, std::string skip_name);

  std::string_view kind() const override { return kKind; }
  const std::string& skip_name() const { return skip_; }
  LayerCost cost() const override;
  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;

 private:
  std::string skip_;
};

}  // namespace pt
