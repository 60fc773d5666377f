#pragma once
// The one forward pass through a range of layers. Every caller that runs layers forward uses it:
// single-device training and evaluation (Trainer), the pipeline's stages, text generation and
// cost profiling. One micro-batch's layer contexts share one skip board, so a model built with
// .save()/.add_saved() runs the same everywhere.
#include <functional>
#include <vector>

#include "layers/model.h"

namespace pt {

// The contexts of one micro-batch on layers [first_layer, last_layer), plus the loss's context
// (key = the model's layer count) when `with_loss`. Layer l's context has key l (its global
// index: dropout masks derive from it). Not copyable or movable: the contexts point at the
// board and at the step info held here.
class MicrobatchContexts {
 public:
  MicrobatchContexts(Backend& backend, const StepInfo& info, int first_layer, int last_layer,
                     bool with_loss);
  MicrobatchContexts(const MicrobatchContexts&) = delete;
  MicrobatchContexts& operator=(const MicrobatchContexts&) = delete;

  LayerContext& layer(int l) { return contexts_.at(static_cast<size_t>(l - first_layer_)); }
  LayerContext& loss() { return contexts_.back(); }  // only when constructed `with_loss`
  SkipBoard& skips() { return skips_; }
  const StepInfo& info() const { return info_; }

 private:
  StepInfo info_;
  SkipBoard skips_;
  int first_layer_;
  std::vector<LayerContext> contexts_;
};

// Called after layer l's forward with its input, output and context (profiling times the layer
// here; the pass goes on with `y`).
using AfterLayer = std::function<void(int l, const Tensor& x, const Tensor& y, LayerContext& ctx)>;

// Called before layer l's forward (full sharding gathers the layer's parameters here).
using BeforeLayer = std::function<void(int l)>;

// y = layers [first, last) of `model` applied to x in order, each with its context in `contexts`.
Tensor forward_layers(const Model& model, int first, int last, Tensor x,
                      MicrobatchContexts& contexts, const AfterLayer& after_layer = {},
                      const BeforeLayer& before_layer = {});

}  // namespace pt
