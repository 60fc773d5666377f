#pragma once
// A Model is the definition of a network: the ordered layers (each knowing its per-sample input
// and output shapes) and the loss. It holds no device memory of its own: a stage instantiates
// the parameters of a contiguous layer range on one device (engine/train/stage_parameters.h) and
// binds them to the layers. Global layer indices (0-based positions in `layers`) name parameters
// everywhere: in initialisation, checkpoints and the partitioner.
#include <memory>
#include <string>
#include <vector>

#include "layers/layer.h"
#include "layers/tensor_parallel/group.h"

namespace pt {

// One parameter of one layer: (global layer index, index in its param_specs()).
struct ParamRef {
  int layer = 0;
  size_t param = 0;
  auto operator<=>(const ParamRef&) const = default;
};

// One logical parameter held by several layers (GPT's LM head and token embedding). Each layer
// keeps its own copy, because the layers may sit on different stages; the copies start equal
// (all initialised like members[0]), their gradients are summed in member order before every
// optimizer step and handed to every copy, so the copies stay bit-identical. The gradient norm
// counts the parameter once (members[0]).
struct ParameterTie {
  std::vector<ParamRef> members;  // sorted by layer; members[0] is the owner
};

// A skip connection between two top-level layers (builder .save(name) ... .add_saved(name)).
struct SkipEdge {
  std::string name;
  int producer = 0;  // the SaveActivation layer
  int consumer = 0;  // the AddSaved layer
};

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

  // Parameters held by the layers: a tied parameter once per copy (each copy has its memory).
  int64_t param_count() const;
  // Parameters the model learns: a tied parameter once (GPT-2 124M: 124,475,904, where
  // param_count() counts its 50304 x 768 token embedding twice). What FLOP counts (6 N per
  // token) and a model's name use.
  int64_t unique_param_count() const;
  // The table of `summary()`: index, name, output shape, params, FLOPs, activation bytes.
  std::string summary() const;
  // A one-line-per-layer text identifying the architecture (kinds, names, shapes, parameter
  // shapes). Checkpoints store it to refuse loading into another model.
  std::string signature() const;

  // False when no layer before layer l has parameters: then nothing uses dL/d(input of l), and
  // training skips that layer's backward_input (an MLP's first GEMM-sized input gradient).
  bool needs_input_gradient(int l) const { return l > first_param_layer_; }

  // The skip connections between top-level layers, in producer order.
  const std::vector<SkipEdge>& skip_edges() const { return skips_; }

  // Ties parameter `a_param` of layer `a` to `b_param` of layer `b` (names as in param_specs(),
  // e.g. "weight"); throws ShapeError when a name is unknown, the shapes differ, or either is
  // already tied.
  void tie(int a, const std::string& a_param, int b, const std::string& b_param);
  const std::vector<ParameterTie>& ties() const { return ties_; }
  // The tie `ref` belongs to, or nullptr.
  const ParameterTie* tie_of(const ParamRef& ref) const;

  // The tensor-parallel rank this model was sharded for (layers/tensor_parallel/shard_model.h;
  // size 1: a model as written).
  const TensorParallel& tensor_parallel() const { return tp_; }

 private:
  friend Model shard_model(Model model, const TensorParallel& tp,
                           std::vector<std::string>* replicated);
  Shape input_shape_;
  DType input_dtype_ = DType::f32;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<Loss> loss_;
  std::vector<ParameterTie> ties_;
  std::vector<SkipEdge> skips_;
  int first_param_layer_ = 0;  // the first layer with parameters (num_layers() if none)
  TensorParallel tp_;
  // A shard's signature() is the whole model's, so a checkpoint of one loads into the other.
  std::string whole_signature_;
};

// "{global_layer_index}.{layer_name}.{param}", e.g. "0.linear.weight": the name of a parameter
// in checkpoints (documented in docs/checkpoints.md).
std::string parameter_name(int global_layer_index, const Layer& layer, const std::string& param);

}  // namespace pt
