#pragma once
// An Embedding whose table is split by rows across the T ranks of a tensor-parallel group
// (Megatron-LM's VocabParallelEmbedding): rank t holds the rows [t V/T, (t+1) V/T).
//   forward:  y_t[i] = W_t[ids[i] - t V/T] for an id in the rank's rows, zeros for the others;
//             y = sum_t y_t (all-reduce): every rank has the whole (B, T', dim) activation, and
//             each element is one row's value plus zeros, so y is the Embedding's, bit for bit.
//   backward: no gradient into the ids (backward_input returns Tensor(), as Embedding's);
//             dW_t[ids[i] - t V/T] += dy[i] for the rank's ids only (no collective: dy is whole
//             on every rank).
// The parameter keeps the Embedding's name ("weight"), initial distribution and kind
// ("embedding": a shard of an embedding is one, and checkpoints, which store the whole table
// through ParamShard, name it so). With T = 1 it is the Embedding (the same calls' results).
#include <cstdint>
#include <string>
#include <string_view>

#include "layers/layer.h"
#include "layers/tensor_parallel/group.h"

namespace pt {

class VocabParallelEmbedding final : public Layer {
 public:
  // in: the per-sample shape of the ids, usually (T); vocab: of the whole table, which must
  // divide by tp.size (ShapeError naming both otherwise).
  VocabParallelEmbedding(std::string name, Shape in, int64_t vocab, int64_t dim, ParamInit init,
                         const TensorParallel& tp);

  std::string_view kind() const override;  // "embedding"
  DType input_dtype() const override { return DType::i32; }
  int64_t vocab() const { return vocab_; }  // the whole table's
  int64_t dim() const { return dim_; }
  // The rows this rank holds, of the whole vocabulary.
  VocabRange rows() const { return range_; }
  std::vector<ParamSpec> param_specs() const override;
  LayerCost cost() const override;

  Tensor forward(const Tensor& ids, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;  // returns Tensor()
  void backward_weight(const Tensor& dy, LayerContext& ctx) override;
  // output_split: the default (the input's, never split) says what holds: the output is whole.
  // (Under sequence parallelism it stays whole too: the first transformer block takes its
  // chunk after the position embedding is added, as Megatron-Core's embedding scatters.)

 private:
  int64_t vocab_, dim_;
  ParamInit init_;
  TensorParallel tp_;
  VocabRange range_;
};

}  // namespace pt
