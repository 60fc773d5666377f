#pragma once
// Embedding (PyTorch nn.Embedding): token ids -> rows of a table.
//   ids (B, T) int32 -> y (B, T, dim),  y[b, t] = W[ids[b, t]],  W (vocab, dim).
// Backward: no gradient flows into ids (backward_input returns an undefined Tensor);
//   dW[ids[b, t]] += dy[b, t]   (a scatter-add). Saves the ids.
// Init: W normal(0, 1) like PyTorch, or what the caller gives (GPT-2 uses normal(0, 0.02)).
// Built on ids (T, ...), it also runs on a shorter sequence: ids (B, T', ...) with 1 <= T' <= T
// give y (B, T', ..., dim).
#include <cstdint>
#include <memory>
#include <string_view>

#include "layers/layer.h"

namespace pt {

class Embedding final : public Layer {
 public:
  static constexpr std::string_view kKind = "embedding";

  // in: the per-sample shape of the ids, usually (T).
  Embedding(Shape in, int64_t vocab, int64_t dim, ParamInit init = ParamInit::normal(1.f));

  std::string_view kind() const override { return kKind; }
  DType input_dtype() const override { return DType::i32; }
  int64_t vocab() const { return vocab_; }
  int64_t dim() const { return dim_; }
  const ParamInit& init() const { return init_; }
  std::vector<ParamSpec> param_specs() const override;
  LayerCost cost() const override;
  // Declared vocab (builder .parallel(ParallelStyle::vocab)) with more than one rank: a
  // VocabParallelEmbedding with this name and init (layers/tensor_parallel/). Its ids are never
  // split: a split input is a ShapeError.
  std::unique_ptr<Layer> shard_for(const TensorParallel& tp, ActivationSplit input) const override;

  Tensor forward(const Tensor& ids, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;  // returns Tensor()
  void backward_weight(const Tensor& dy, LayerContext& ctx) override;

 private:
  int64_t vocab_, dim_;
  ParamInit init_;
};

}  // namespace pt
