#include "layers/builder.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layers.h"

namespace pt {

ModelBuilder::ModelBuilder(Shape input_shape, DType input_dtype)
    : input_shape_(input_shape),
      input_dtype_(input_dtype),
      shape_(input_shape),
      dtype_(input_dtype) {
  if (input_shape.rank() == 0 && input_dtype != DType::i32)
    throw ShapeError(
        "ModelBuilder: the input shape is empty; give the per-sample shape, e.g. {1, 28, 28}");
  for (int64_t d : input_shape)
    if (d <= 0)
      throw ShapeError(
          fmt::format("ModelBuilder: input shape {} has a dimension <= 0", input_shape.str()));
}

template <class L, class... Args>
ModelBuilder& ModelBuilder::emplace(std::string_view what, Args&&... args) {
  const int index = index_offset_ + num_layers();
  std::unique_ptr<Layer> layer;
  try {
    layer = std::make_unique<L>(shape_, std::forward<Args>(args)...);
  } catch (const ShapeError& e) {
    throw ShapeError(
        fmt::format("layer {} ({}): {} [input shape {}]", index, what, e.what(), shape_.str()));
  }
  return add(std::move(layer));
}

ModelBuilder& ModelBuilder::add(std::unique_ptr<Layer> layer) {
  const int index = index_offset_ + num_layers();
  if (layer->input_shape() != shape_)
    throw ShapeError(
        fmt::format("layer {} ({} '{}'): expects input {} but the previous layer gives {}", index,
                    layer->kind(), layer->name(), layer->input_shape().str(), shape_.str()));
  if (layer->input_dtype() != dtype_)
    throw ShapeError(fmt::format(
        "layer {} ({} '{}'): expects {} input but the previous layer gives {}", index,
        layer->kind(), layer->name(), dtype_name(layer->input_dtype()), dtype_name(dtype_)));
  shape_ = layer->output_shape();
  dtype_ = DType::f32;  // every layer produces f32 activations
  layers_.push_back(std::move(layer));
  return *this;
}

ModelBuilder& ModelBuilder::linear(int64_t out_features, bool bias) {
  return emplace<Linear>("linear", out_features, bias);
}
ModelBuilder& ModelBuilder::relu() { return emplace<ActivationLayer>("relu", Activation::relu); }
ModelBuilder& ModelBuilder::gelu(bool tanh_approximation) {
  return emplace<ActivationLayer>(
      "gelu", tanh_approximation ? Activation::gelu_tanh : Activation::gelu_erf);
}
ModelBuilder& ModelBuilder::tanh() { return emplace<ActivationLayer>("tanh", Activation::tanh); }
ModelBuilder& ModelBuilder::dropout(float p) { return emplace<Dropout>("dropout", p); }
ModelBuilder& ModelBuilder::layer_norm(float eps) { return emplace<LayerNorm>("layer_norm", eps); }
ModelBuilder& ModelBuilder::embedding(int64_t vocab, int64_t dim) {
  return emplace<Embedding>("embedding", vocab, dim);
}
ModelBuilder& ModelBuilder::flatten() { return emplace<Flatten>("flatten"); }
ModelBuilder& ModelBuilder::reshape(Shape per_sample_shape) {
  return emplace<Reshape>("reshape", per_sample_shape);
}
ModelBuilder& ModelBuilder::conv2d(int64_t out_channels, int64_t kernel, int64_t stride,
                                   int64_t padding, bool bias) {
  return emplace<Conv2d>("conv2d", out_channels, kernel, stride, padding, bias);
}
ModelBuilder& ModelBuilder::max_pool(int64_t kernel, int64_t stride, int64_t padding) {
  return emplace<MaxPool2d>("max_pool", kernel, stride, padding);
}
ModelBuilder& ModelBuilder::avg_pool(int64_t kernel, int64_t stride, int64_t padding) {
  return emplace<AvgPool2d>("avg_pool", kernel, stride, padding);
}

ModelBuilder& ModelBuilder::save(const std::string& skip_name) {
  if (saved_.count(skip_name))
    throw ShapeError(fmt::format(
        "layer {} (save): a skip named '{}' was already saved; give each skip its own name",
        index_offset_ + num_layers(), skip_name));
  saved_[skip_name] = shape_;
  return emplace<SaveActivation>("save", skip_name);
}

ModelBuilder& ModelBuilder::add_saved(const std::string& skip_name) {
  const auto it = saved_.find(skip_name);
  if (it == saved_.end())
    throw ShapeError(
        fmt::format("layer {} (add_saved): no skip named '{}' was saved before; call .save(\"{}\") "
                    "earlier in the model",
                    index_offset_ + num_layers(), skip_name, skip_name));
  if (it->second != shape_)
    throw ShapeError(fmt::format(
        "layer {} (add_saved '{}'): the saved activation is {} but the current one is {}; "
        "add it where the shapes match",
        index_offset_ + num_layers(), skip_name, it->second.str(), shape_.str()));
  saved_.erase(it);
  return emplace<AddSaved>("add_saved", skip_name);
}

ModelBuilder& ModelBuilder::residual(const std::function<void(ModelBuilder&)>& body) {
  ModelBuilder inner(shape_, dtype_);
  inner.index_offset_ = index_offset_ + num_layers();
  body(inner);
  if (inner.layers_.empty())
    throw ShapeError(fmt::format("layer {} (residual): the body is empty; add at least one layer",
                                 index_offset_ + num_layers()));
  return emplace<Residual>("residual", std::move(inner.layers_));
}

ModelBuilder& ModelBuilder::parallel(ParallelStyle style) {
  if (layers_.empty())
    throw ShapeError(
        fmt::format("parallel({}): there is no layer to declare yet", parallel_style_name(style)));
  layers_.back()->set_parallel_style(style);
  return *this;
}

ModelBuilder& ModelBuilder::name(std::string layer_name) {
  if (layers_.empty()) throw ShapeError("name(): there is no layer to name yet");
  if (layer_name.empty() || layer_name.find_first_of(". \t\n") != std::string::npos)
    throw ShapeError(
        fmt::format("name('{}'): a layer name must be non-empty without dots or spaces "
                    "(it becomes part of checkpoint tensor names)",
                    layer_name));
  layers_.back()->set_name(std::move(layer_name));
  return *this;
}

ModelBuilder& ModelBuilder::cross_entropy() {
  try {
    loss_ = std::make_unique<SoftmaxCrossEntropy>(shape_);
  } catch (const ShapeError& e) {
    throw ShapeError(fmt::format("loss (cross_entropy): {}", e.what()));
  }
  return *this;
}

ModelBuilder& ModelBuilder::mse() {
  loss_ = std::make_unique<MseLoss>(shape_);
  return *this;
}

Model ModelBuilder::build() {
  if (layers_.empty()) throw ShapeError("build(): the model has no layers");
  if (!loss_) throw ShapeError("build(): no loss chosen; end with .cross_entropy() or .mse()");
  if (!saved_.empty())
    throw ShapeError(fmt::format(
        "build(): the skip '{}' is saved but never added; add .add_saved(\"{}\") or drop "
        "the .save()",
        saved_.begin()->first, saved_.begin()->first));
  return Model(input_shape_, input_dtype_, std::move(layers_), std::move(loss_));
}

}  // namespace pt
