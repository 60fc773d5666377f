#include "engine/train/forward_pass.h"

namespace pt {

MicrobatchContexts::MicrobatchContexts(Backend& backend, const StepInfo& info, int first_layer,
                                       int last_layer, bool with_loss)
    : info_(info), first_layer_(first_layer) {
  contexts_.reserve(static_cast<size_t>(last_layer - first_layer) + 1);
  for (int l = first_layer; l < last_layer; ++l)
    contexts_.emplace_back(backend, info_, static_cast<uint64_t>(l));
  // The loss's key is the model's layer count, which is last_layer for the last stage.
  if (with_loss) contexts_.emplace_back(backend, info_, static_cast<uint64_t>(last_layer));
  for (LayerContext& c : contexts_) c.set_skips(&skips_);
}

Tensor forward_layers(const Model& model, int first, int last, Tensor x,
                      MicrobatchContexts& contexts, const AfterLayer& after_layer,
                      const BeforeLayer& before_layer) {
  for (int l = first; l < last; ++l) {
    if (before_layer) before_layer(l);
    LayerContext& ctx = contexts.layer(l);
    Tensor y = model.layer(l).forward(x, ctx);
    if (after_layer) after_layer(l, x, y, ctx);
    x = std::move(y);
  }
  return x;
}

}  // namespace pt
