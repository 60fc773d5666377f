#pragma once
// Embedding (PyTorch nn.Embedding): token ids -> rows of a table.
//   ids (B, T) int32 -> y (B, T, dim),  y[b, t] = W[ids[b, t]],  W (vocab, dim).
// Backward: no gradient flows into ids (backward_input returns an undefined Tensor);
//   dW[ids[b, t]] += dy[b, t]   (a scatter-add). Saves the ids.
// Init: W normal(0, 1) like PyTorch, or what the caller gives (GPT-2 uses normal(0, 0.02)).
// Built on ids (T, ...), it also runs on a shorter sequence: ids (B, T', ...) with 1 <= T' <= T
// give y (B, T', ..., dim).
//
// Tensor parallelism (built with T ranks; Megatron-LM's VocabParallelEmbedding): the table is
// split by rows, rank t holding rows [t V/T, (t+1) V/T).
//   forward:  y_t[i] = W_t[ids[i] - t V/T] for an id in the rank's rows, zeros for the others;
//             y = sum_t y_t (all-reduce): every rank has the whole (B, T', dim) activation, and
//             each element is one row's value plus zeros, so y is the whole table's, bit for bit.
//   backward: dW_t[ids[i] - t V/T] += dy[i] for the rank's ids only (dy is whole everywhere).
// The vocabulary must divide by T (ShapeError naming both, and padding as the fix). The ids are
// never split; the output is whole (under sequence parallelism the first transformer block
// takes its chunk after the position embedding is added).
#include <cstdint>
#include <memory>
#include <string_view>

#include "layers/layer.h"
#include "layers/tensor_parallel/group.h"

namespace pt {

class Embedding final : public Layer {
 public:
  static constexpr std::string_view kKind = "embedding";

  // in: the per-sample shape of the ids, usually (T); vocab: of the whole table.
  Embedding(Shape in, int64_t vocab, int64_t dim, ParamInit init = ParamInit::normal(1.f),
            const TensorParallel& tp = {});

  std::string_view kind() const override { return kKind; }
  DType input_dtype() const override { return DType::i32; }
  int64_t vocab() const { return vocab_; }    // the whole table's
  VocabRange rows() const { return range_; }  // the rows this rank holds
  int64_t dim() const { return dim_; }
  const ParamInit& init() const { return init_; }
  std::vector<ParamSpec> param_specs() const override;
  LayerCost cost() const override;
  // Declared vocab (builder .parallel(ParallelStyle::vocab)) with more than one rank: the same
  // embedding built for rank tp.rank (above). Its ids are never split: a split input is a
  // ShapeError.
  std::unique_ptr<Layer> shard_for(const TensorParallel& tp, ActivationSplit input) const override;

  Tensor forward(const Tensor& ids, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;  // returns Tensor()
  void backward_weight(const Tensor& dy, LayerContext& ctx) override;

 private:
  int64_t vocab_, dim_;
  ParamInit init_;
  TensorParallel tp_;
  VocabRange range_;  // all rows without tensor parallelism
};

}  // namespace pt
