#include "layers/layer.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/random.h"
#include "layers/tensor_parallel/group.h"

namespace pt {

size_t LayerContext::saved_bytes() const {
  size_t n = 0;
  for (const Tensor& t : saved_) n += t.bytes();
  for (const auto& c : children_)
    if (c) n += c->saved_bytes();
  return n;
}

LayerContext& LayerContext::child(size_t i) {
  if (children_.size() <= i) children_.resize(i + 1);
  if (!children_[i]) {
    children_[i] = std::make_unique<LayerContext>(*backend_, *info_, hash_keys(key_, i + 1));
    children_[i]->set_skips(skips_);
  }
  return *children_[i];
}

SkipBoard& LayerContext::skips() const {
  if (!skips_)
    throw std::logic_error(
        "a skip layer (save / add_saved) ran without a skip board: run it inside a Model "
        "through a trainer, which gives every micro-batch one");
  return *skips_;
}

void LayerContext::clear() {
  saved_.clear();
  for (auto& c : children_)
    if (c) c->clear();
}

int64_t Layer::param_count() const {
  int64_t n = 0;
  for (const ParamSpec& p : param_specs()) n += p.shape.numel();
  return n;
}

void Layer::bind(std::span<const Tensor> params, std::span<const Tensor> grads) {
  const auto specs = param_specs();
  if (params.size() != specs.size() || grads.size() != specs.size())
    throw ShapeError(
        fmt::format("layer '{}' has {} parameters but was bound to {} tensors and {} gradients",
                    name_, specs.size(), params.size(), grads.size()));
  for (size_t i = 0; i < specs.size(); ++i)
    if (params[i].shape() != specs[i].shape || grads[i].shape() != specs[i].shape)
      throw ShapeError(fmt::format("layer '{}' parameter '{}' is {} but was bound to {}", name_,
                                   specs[i].name, specs[i].shape.str(), params[i].shape().str()));
  params_.assign(params.begin(), params.end());
  grads_.assign(grads.begin(), grads.end());
}

void Layer::unbind() {
  params_.clear();
  grads_.clear();
}

const char* parallel_style_name(ParallelStyle s) {
  switch (s) {
    case ParallelStyle::replicated: return "replicated";
    case ParallelStyle::column: return "column";
    case ParallelStyle::row: return "row";
    case ParallelStyle::vocab: return "vocab";
  }
  return "?";
}

std::unique_ptr<Layer> Layer::shard_for(const TensorParallel& tp, ActivationSplit input) const {
  if (style_ != ParallelStyle::replicated)
    throw ShapeError(fmt::format(
        "layer '{}' ({}) is declared {}-parallel but has no tensor-parallel form; remove the "
        "declaration (it then runs whole on every rank)",
        name_, kind(), parallel_style_name(style_)));
  if (input.whole()) return nullptr;
  Shape part = input_shape_;
  if (input.features) {
    if (part.rank() == 0 || part.back() % tp.size != 0)
      throw ShapeError(fmt::format("layer '{}' ({}): its input {} does not split into {} slices",
                                   name_, kind(), input_shape_.str(), tp.size));
    part[part.rank() - 1] /= tp.size;
  }
  if (input.sequence) {
    if (part.rank() < 2 || part[0] % tp.size != 0)
      throw ShapeError(fmt::format(
          "layer '{}' ({}): its input {} is not a sequence (T, ...) whose T divides into {} "
          "chunks (sequence parallelism)",
          name_, kind(), input_shape_.str(), tp.size));
    part[0] /= tp.size;
  }
  std::unique_ptr<Layer> rebuilt = param_count() == 0 ? rebuilt_for(part) : nullptr;
  if (!rebuilt) {
    if (input.features)
      throw ShapeError(fmt::format(
          "layer '{}' ({}) follows a column-parallel layer, whose output each rank holds a slice "
          "of, but it is not element-wise; move it after the row-parallel layer that closes the "
          "pair, or declare the layer before it replicated",
          name_, kind()));
    throw ShapeError(fmt::format(
        "layer '{}' ({}) follows a sequence-parallel region, whose output each rank holds a "
        "chunk of the sequence of, but it cannot run on a chunk; end the model's sequence-"
        "parallel part before it (a column-parallel layer gathers the sequence) or turn "
        "sequence parallelism off (--sequence-parallel off)",
        name_, kind()));
  }
  rebuilt->set_name(name_);
  return rebuilt;
}

std::unique_ptr<Loss> Loss::shard_for(const TensorParallel& tp, ActivationSplit input) const {
  (void)tp;
  if (input.whole()) return nullptr;
  if (input.sequence)
    throw ShapeError(fmt::format(
        "the loss ({}) cannot take a prediction split along the sequence (sequence "
        "parallelism); end the model with a column-parallel layer, which gathers the sequence",
        kind()));
  throw ShapeError(fmt::format(
      "the loss ({}) cannot take a prediction split across tensor-parallel ranks; end the model "
      "with a row-parallel or replicated layer",
      kind()));
}

Tensor Layer::backward(const Tensor& dy, LayerContext& ctx) {
  Tensor dx = backward_input(dy, ctx);
  backward_weight(dy, ctx);
  return dx;
}

namespace {

// Zeroes the gradients of a layer that cannot write them and says which can; returns what
// LayerContext::gradients_unwritten says during the call.
bool prepare_unwritten(Layer& layer, LayerContext& ctx, bool unwritten) {
  const bool writes = unwritten && layer.writes_unwritten_gradients();
  if (unwritten && !writes)
    for (const Tensor& g : layer.grads())
      if (g.numel()) ctx.backend().fill(g.f32(), 0.f, g.numel());
  return writes;
}

}  // namespace

void run_backward_weight(Layer& layer, const Tensor& dy, LayerContext& ctx, bool unwritten) {
  ctx.set_gradients_unwritten(prepare_unwritten(layer, ctx, unwritten));
  layer.backward_weight(dy, ctx);
  ctx.set_gradients_unwritten(false);
}

Tensor run_backward(Layer& layer, const Tensor& dy, LayerContext& ctx, bool unwritten) {
  ctx.set_gradients_unwritten(prepare_unwritten(layer, ctx, unwritten));
  Tensor dx = layer.backward(dy, ctx);
  ctx.set_gradients_unwritten(false);
  return dx;
}

}  // namespace pt
