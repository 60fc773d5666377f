#pragma once
// The Layer interface. A layer is defined for one per-sample input shape; tensors passed to it
// carry a leading batch dimension: x (B, ...input_shape) -> y (B, ...output_shape).
//
// Backward is split in two calls, because zero-bubble schedules run them at different times:
//   backward_input(dy)  -> dx          (overwrites; never touches parameter gradients)
//   backward_weight(dy)                (dW += ...: parameter gradients accumulate, except
//                                       where the caller says they hold nothing yet, below)
// For every micro-batch the caller runs forward, then backward_input, then backward_weight with
// the same dy, all with the same LayerContext. Whatever forward saves for backward lives in that
// context, which the caller owns: it may keep several micro-batches in flight, clear one as soon
// as its backward is done, or clear it and run forward again (recomputation).
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/core/backend.h"
#include "engine/core/tensor.h"

namespace pt {

// Where this forward/backward sits in training; dropout masks derive from it.
struct StepInfo {
  uint64_t seed = 0;
  int64_t step = 0;
  int microbatch = 0;
  bool training = true;  // false: evaluation (dropout is the identity, nothing needs saving)
};

// Activations that skip ahead (builder .save("x") ... .add_saved("x")) and their gradients, for
// one micro-batch. SaveActivation puts x here in forward and takes its gradient in backward;
// AddSaved takes x in forward and puts its gradient. A pipeline moves entries between stages
// directly from the producing stage to the consuming one (and the gradient back).
struct SkipBoard {
  std::map<std::string, Tensor> activations;
  std::map<std::string, Tensor> gradients;
};

class LayerContext {
 public:
  // key identifies the layer within the model (top level: the global layer index).
  LayerContext(Backend& backend, const StepInfo& info, uint64_t key)
      : backend_(&backend), info_(&info), key_(key) {}

  Backend& backend() const { return *backend_; }
  const StepInfo& info() const { return *info_; }
  uint64_t key() const { return key_; }
  // The micro-batch's skip board (children share their parent's); throws when none was given.
  SkipBoard& skips() const;
  void set_skips(SkipBoard* board) { skips_ = board; }

  Tensor alloc(const Shape& shape, DType dtype = DType::f32) const {
    return backend_->empty(shape, dtype);
  }
  void save(Tensor t) { saved_.push_back(std::move(t)); }
  const Tensor& saved(size_t i) const { return saved_.at(i); }
  size_t saved_count() const { return saved_.size(); }
  // Bytes held by saved tensors here and in children (for memory accounting and tests).
  size_t saved_bytes() const;

  // The context of a composite layer's i-th sub-layer (created on first use; its key derives
  // from this key and i).
  LayerContext& child(size_t i);

  // Drops everything saved, here and in children.
  void clear();

  // Set around backward_weight by run_backward_weight (below) for a layer that honours it: its
  // parameter gradients hold nothing yet, so it writes them (dW = ... instead of dW += ...;
  // the GEMM's beta 0) and no separate pass zeroes them first. Children's contexts never say so.
  bool gradients_unwritten() const { return gradients_unwritten_; }
  void set_gradients_unwritten(bool unwritten) { gradients_unwritten_ = unwritten; }

 private:
  Backend* backend_;
  const StepInfo* info_;
  uint64_t key_;
  bool gradients_unwritten_ = false;
  SkipBoard* skips_ = nullptr;
  std::vector<Tensor> saved_;
  std::vector<std::unique_ptr<LayerContext>> children_;
};

// How a parameter is initialised (PyTorch's defaults are expressed with these).
struct ParamInit {
  enum class Kind { zeros, ones, uniform, normal };
  Kind kind = Kind::zeros;
  float a = 0.f;  // uniform: bound (values in [-a, a)); normal: standard deviation
  static ParamInit zeros() { return {Kind::zeros, 0.f}; }
  static ParamInit ones() { return {Kind::ones, 0.f}; }
  static ParamInit uniform(float bound) { return {Kind::uniform, bound}; }
  static ParamInit normal(float stddev) { return {Kind::normal, stddev}; }
};

// How a tensor-parallel layer's parameter is a slice of the whole one (layers/tensor_parallel/):
// `dim` of the whole shape is `groups` equal blocks (QKV's q, k, v: 3; otherwise 1), and rank r
// of `ranks` holds the r-th part of every block, in block order. Initial values, checkpoints and
// gradient norms see the whole parameter through this. dim < 0: not split (every rank holds
// the whole parameter, a replica).
struct ParamShard {
  int dim = -1;
  int rank = 0, ranks = 1;
  int groups = 1;
  Shape whole;  // the unsplit shape (set when dim >= 0)

  bool split() const { return dim >= 0; }
};

struct ParamSpec {
  ParamSpec() = default;
  ParamSpec(std::string name_, Shape shape_, ParamInit init_, ParamShard shard_ = {})
      : name(std::move(name_)), shape(shape_), init(init_), shard(std::move(shard_)) {}

  std::string name;  // "weight", "bias"; composite layers prefix their children: "1.weight"
  Shape shape;       // as this layer holds it (a tensor-parallel shard: the slice's shape)
  ParamInit init;
  ParamShard shard;  // how `shape` is a slice of the whole parameter (default: it is the whole)
};

// How a layer splits across the ranks of a tensor-parallel group (Megatron-LM's layers). A
// layer that declares nothing is replicated: every rank holds it whole and runs it on the same
// activations. Linear layers pair: column (output features split; the activation after it is
// split on its last dimension) then row (input features split; partial outputs summed).
// vocab: an embedding's table split by rows (token ids), or the LM head split by vocabulary,
// whose split logits feed the vocab-parallel loss.
enum class ParallelStyle : uint8_t { replicated, column, row, vocab };
const char* parallel_style_name(ParallelStyle s);
struct TensorParallel;  // layers/tensor_parallel/group.h

// How the activation between two layers is split across the ranks of a tensor-parallel group
// (shard_model walks it layer by layer). Neither: whole on every rank.
struct ActivationSplit {
  // Each rank a slice of the last dimension (after a column-parallel layer).
  bool features = false;
  // Each rank a chunk of the sequence (sequence parallelism, Korthikanti et al. 2022): of
  // (B, T', ...) rank t holds tokens [t T'/T, (t+1) T'/T) of every sequence, (B, T'/T, ...).
  bool sequence = false;

  bool whole() const { return !features && !sequence; }
  bool operator==(const ActivationSplit&) const = default;
};

// Per-sample costs, used by the model summary and the partitioner.
struct LayerCost {
  double forward_flops = 0;  // multiply-add = 2 FLOPs
  double backward_input_flops = 0;
  double backward_weight_flops = 0;
  int64_t activation_bytes = 0;  // bytes forward saves for backward, per sample
};

class Layer {
 public:
  Layer(std::string name, Shape input_shape) : name_(std::move(name)), input_shape_(input_shape) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  // "linear", "relu", "conv2d", ... (stable: used in checkpoint names when no name is given).
  virtual std::string_view kind() const = 0;
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  const Shape& input_shape() const { return input_shape_; }    // per sample
  const Shape& output_shape() const { return output_shape_; }  // per sample
  virtual DType input_dtype() const { return DType::f32; }

  virtual std::vector<ParamSpec> param_specs() const { return {}; }
  int64_t param_count() const;

  // ---- tensor parallelism (layers/tensor_parallel/shard_model.h) -----------------------------
  // The style declared for this layer (builder .parallel(style)); composite layers that know
  // their own split (the transformer block) ignore it.
  ParallelStyle parallel_style() const { return style_; }
  void set_parallel_style(ParallelStyle style) { style_ = style; }
  // This layer as rank tp.rank of tp.size builds it, or nullptr when it stays as it is (a
  // replica). `input`: how the activation reaching it is split (features: it follows a
  // column-parallel layer; sequence: it follows a sequence-parallel region); a layer that
  // cannot run on such a part throws ShapeError saying so. The default: element-wise layers
  // (rebuilt_for) rebuilt for the feature slice or the sequence chunk, others replicated on
  // whole activations.
  virtual std::unique_ptr<Layer> shard_for(const TensorParallel& tp, ActivationSplit input) const;
  // After shard_for: how this layer's output is split, given its input's (element-wise layers
  // pass the split on; a column-parallel layer starts a feature split, a row-parallel layer
  // ends it; a sequence-parallel transformer block leaves its output split along the sequence).
  virtual ActivationSplit output_split(ActivationSplit input) const { return input; }
  virtual LayerCost cost() const = 0;

  // Gives the layer views of its parameters and gradients, in param_specs() order.
  virtual void bind(std::span<const Tensor> params, std::span<const Tensor> grads);
  // Drops the views given by bind(). Whoever bound a layer unbinds it before the memory's
  // backend goes away (a view keeps its storage, and so a pointer to the backend, alive).
  virtual void unbind();
  std::span<const Tensor> params() const { return params_; }
  std::span<const Tensor> grads() const { return grads_; }

  virtual Tensor forward(const Tensor& x, LayerContext& ctx) = 0;
  virtual Tensor backward_input(const Tensor& dy, LayerContext& ctx) = 0;
  virtual void backward_weight(const Tensor& dy, LayerContext& ctx) {
    (void)dy;
    (void)ctx;
  }
  // backward_input then backward_weight with the same dy, for a caller that runs them together
  // (every schedule but those that split the backward): a layer may overlap the two, computing
  // weight gradients while its input gradient's collective is in flight (Megatron-LM's
  // asynchronous tensor-parallel all-reduce). The same bits as the two calls in turn, which is
  // the default.
  virtual Tensor backward(const Tensor& dy, LayerContext& ctx);
  // Whether backward_weight writes its gradients when LayerContext::gradients_unwritten says so.
  virtual bool writes_unwritten_gradients() const { return false; }
  // Called once a step, after the step's last backward_weight and before the gradients are
  // reduced across replicas, clipped or applied: a layer that deferred part of its gradients'
  // reduction completes it (a sequence-parallel LayerNorm sums its parameters' gradients over
  // the tensor-parallel ranks once a step, as Megatron-Core does). Composite layers pass it on;
  // the default has nothing to complete.
  virtual void complete_gradients(Backend& backend) { (void)backend; }

 protected:
  // For element-wise layers (activations): the same layer for the per-sample shape `in`
  // (a column-parallel slice of the features, or a chunk of the sequence); nullptr: the layer
  // cannot be rebuilt so.
  virtual std::unique_ptr<Layer> rebuilt_for(const Shape& in) const {
    (void)in;
    return nullptr;
  }

  std::string name_;
  Shape input_shape_;
  Shape output_shape_;  // set by the derived constructor, after checking the input shape
  std::vector<Tensor> params_;
  std::vector<Tensor> grads_;
  ParallelStyle style_ = ParallelStyle::replicated;
};

// A loss closes the model: it takes the last layer's output and the targets of one micro-batch.
// forward returns this micro-batch's share of the mean loss over the GLOBAL batch (sum over its
// samples / global_batch), so the shares of all micro-batches add up to the full-batch loss and
// the gradients add up to the full-batch gradient.
class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string_view kind() const = 0;
  virtual DType target_dtype() const = 0;
  virtual Shape target_shape() const = 0;  // per sample
  // Throws ShapeError if the model's per-sample output cannot feed this loss.
  virtual void check_input(const Shape& prediction_shape) const = 0;

  virtual double forward(const Tensor& prediction, const Tensor& target, int64_t global_batch,
                         LayerContext& ctx) = 0;
  // d(loss share)/d(prediction), same shape as the prediction.
  virtual Tensor backward(LayerContext& ctx) = 0;
  // The loss of rank tp.rank when the prediction reaching it is split on its last dimension
  // (the vocab-parallel LM head), or nullptr when it stays as it is; throws ShapeError when it
  // cannot take a split prediction (a loss never takes a sequence chunk: the layer before it
  // gathers the sequence).
  virtual std::unique_ptr<Loss> shard_for(const TensorParallel& tp, ActivationSplit input) const;
  // Number of correctly classified samples (classification losses; others return -1).
  virtual int64_t count_correct(const Tensor& prediction, const Tensor& target,
                                Backend& backend) const {
    (void)prediction;
    (void)target;
    (void)backend;
    return -1;
  }
  // forward, and count_correct of the same prediction: what a training step needs of each
  // micro-batch. The default calls the two; a loss that gets both from one pass overrides it
  // (the vocab-parallel loss: one all-gather of its partials, not two).
  struct Counted {
    double loss = 0;
    int64_t correct = -1;
  };
  virtual Counted forward_counting(const Tensor& prediction, const Tensor& target,
                                   int64_t global_batch, LayerContext& ctx) {
    const double loss = forward(prediction, target, global_batch, ctx);
    return {loss, count_correct(prediction, target, ctx.backend())};
  }
};

// layer.backward_weight(dy, ctx) where `unwritten` says whether the layer's gradients were
// written since its step's accumulation began (StageParameters::take_unwritten): such gradients
// are written by a layer that can (Layer::writes_unwritten_gradients) and zeroed first for the
// others.
void run_backward_weight(Layer& layer, const Tensor& dy, LayerContext& ctx, bool unwritten);
// layer.backward(dy, ctx) (input and weight gradients together) with `unwritten` as above.
Tensor run_backward(Layer& layer, const Tensor& dy, LayerContext& ctx, bool unwritten);

}  // namespace pt
