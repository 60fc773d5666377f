#pragma once
// ModelBuilder: a fluent way to define a Model with shape inference.
//
//   Model m = ModelBuilder({1, 28, 28})
//                 .conv2d(32, 3).relu().max_pool(2)
//                 .flatten().linear(10).name("head")
//                 .cross_entropy()
//                 .build();
//
// Each call creates the next layer for the current per-sample shape, so a mismatch is reported
// at the call that causes it, with the layer's index, name, and the expected and actual shapes.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "layers/model.h"

namespace pt {

class ModelBuilder {
 public:
  explicit ModelBuilder(Shape input_shape, DType input_dtype = DType::f32);

  // ---- layers -----------------------------------------------------------------------------
  ModelBuilder& linear(int64_t out_features, bool bias = true);
  ModelBuilder& relu();
  ModelBuilder& gelu(bool tanh_approximation = false);
  ModelBuilder& tanh();
  ModelBuilder& dropout(float p);
  ModelBuilder& layer_norm(float eps = 1e-5f);
  ModelBuilder& embedding(int64_t vocab, int64_t dim);
  ModelBuilder& flatten();
  ModelBuilder& reshape(Shape per_sample_shape);
  ModelBuilder& conv2d(int64_t out_channels, int64_t kernel, int64_t stride = 1,
                       int64_t padding = 0, bool bias = true);
  ModelBuilder& max_pool(int64_t kernel, int64_t stride = 0, int64_t padding = 0);
  ModelBuilder& avg_pool(int64_t kernel, int64_t stride = 0, int64_t padding = 0);
  // y = x + body(x); `body` builds the sub-sequence starting from the current shape and must
  // end at the same shape.
  ModelBuilder& residual(const std::function<void(ModelBuilder&)>& body);
  // A skip connection across any number of layers: save("x") marks the current activation,
  // a later add_saved("x") adds it to the activation there (the shapes must match). Pipelines
  // send it straight from the saving stage to the adding one.
  ModelBuilder& save(const std::string& skip_name);
  ModelBuilder& add_saved(const std::string& skip_name);
  // Any layer built for the current shape (its input shape must equal current_shape()).
  ModelBuilder& add(std::unique_ptr<Layer> layer);
  // Names the most recently added layer (names appear in summaries and checkpoints).
  ModelBuilder& name(std::string layer_name);
  // Declares how the most recently added layer splits under tensor parallelism (--tp T;
  // layers/tensor_parallel/shard_model.h): linears pair column then row, with element-wise
  // layers between; embedding tables split by vocabulary. Undeclared layers stay whole on
  // every rank. No effect at T = 1.
  ModelBuilder& parallel(ParallelStyle style);

  // ---- loss -------------------------------------------------------------------------------
  ModelBuilder& cross_entropy();
  ModelBuilder& mse();

  const Shape& current_shape() const { return shape_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  // Throws ShapeError if no loss was chosen or the layers don't fit together.
  Model build();

 private:
  // Constructs a layer for the current shape; a ShapeError from its constructor is re-thrown
  // with the layer's position.
  template <class L, class... Args>
  ModelBuilder& emplace(std::string_view what, Args&&... args);

  Shape input_shape_;
  DType input_dtype_;
  Shape shape_;
  DType dtype_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<Loss> loss_;
  int index_offset_ = 0;                // position of this builder's first layer in the whole model
  std::map<std::string, Shape> saved_;  // skips saved so far, with their shapes
};

}  // namespace pt
