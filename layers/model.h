#pragma once
// A Model is the definition of a network: the ordered layers (each knowing its per-sample input
// and output shapes) and the loss. It holds no device memory of its own: a stage instantiates
// the parameters of a contiguous layer range on one device (engine/stage_parameters.h) and binds
// them to the layers. Global layer indices (0-based positions in `layers`) name parameters
// everywhere: in initialisation, checkpoints and the partitioner.
#include <memory>
#include <string>
#include <vector>

#include "layers/layer.h"

namespace pt {

class Model {
 public:
  Model() = default;
  Model(Shape input_shape, DType input_dtype, std::vector<std::unique_ptr<Layer>> layers,
        std::unique_ptr<Loss> loss);
  Model(Model&&) = default;
  Model& operator=(Model&&) = default;

  const Shape& input_shape() const { return input_shape_; }
  DType input_dtype() const { return input_dtype_; }
  const Shape& output_shape() const;
  int num_layers() const { return static_cast<int>(layers_.size()); }
  Layer& layer(int i) const { return *layers_.at(static_cast<size_t>(i)); }
  Loss& loss() const { return *loss_; }

  int64_t param_count() const;
  // The table of `summary()`: index, name, output shape, params, FLOPs, activation bytes.
  std::string summary() const;
  // A one-line-per-layer text identifying the architecture (kinds, names, shapes, parameter
  // shapes). Checkpoints store it to refuse loading into another model.
  std::string signature() const;

 private:
  Shape input_shape_;
  DType input_dtype_ = DType::f32;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<Loss> loss_;
};

// "{global_layer_index}.{layer_name}.{param}", e.g. "0.linear.weight": the name of a parameter
// in checkpoints (documented in the README).
std::string parameter_name(int global_layer_index, const Layer& layer, const std::string& param);

}  // namespace pt
