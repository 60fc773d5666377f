#include "layers/tensor_parallel/shard_model.h"

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

Model shard_model(Model model, const TensorParallel& tp, std::vector<std::string>* replicated) {
  if (!tp.enabled()) return model;
  if (!tp.group || tp.rank < 0 || tp.rank >= tp.size)
    throw ShapeError(
        fmt::format("shard_model: rank {} of {} needs a tensor-parallel group", tp.rank, tp.size));
  const std::string whole_signature = model.signature();
  ActivationSplit split;
  for (size_t i = 0; i < model.layers_.size(); ++i) {
    Layer& layer = *model.layers_[i];
    std::unique_ptr<Layer> shard = layer.shard_for(tp, split);
    if (!shard) {
      if (replicated && layer.param_count() > 0)
        replicated->push_back(fmt::format("{} '{}'", i, layer.name()));
      split = {};  // a replica's output is whole (shard_for refused a split input already)
      continue;
    }
    split = shard->output_split(split);
    model.layers_[i] = std::move(shard);
    // The next layer's input is this one's output (each shard checked its own input).
    if (i > 0 && model.layers_[i]->input_shape() != model.layers_[i - 1]->output_shape())
      throw ShapeError(
          fmt::format("shard_model: layer {} ('{}') of rank {} takes {} but layer {} gives {}", i,
                      model.layers_[i]->name(), tp.rank, model.layers_[i]->input_shape().str(),
                      i - 1, model.layers_[i - 1]->output_shape().str()));
  }
  if (std::unique_ptr<Loss> loss = model.loss_->shard_for(tp, split)) model.loss_ = std::move(loss);
  model.loss_->check_input(model.output_shape());
  model.tp_ = tp;
  model.whole_signature_ = whole_signature;
  return model;
}

}  // namespace pt
