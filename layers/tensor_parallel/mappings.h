#pragma once
// The collectives between tensor-parallel regions (Megatron-Core's tensor_parallel/mappings.py),
// named by where they sit. Whole activations (replicated on every rank) and split ones (each rank
// its slice of the features) meet at two places:
//   into a column-parallel layer: forward nothing (every rank has the input); backward the input
//     gradients of the slices are summed (all_reduce_input_gradient);
//   out of a row-parallel layer: forward the partial outputs are summed (all_reduce_output);
//     backward nothing (every rank has the whole gradient).
// So a column/row pair costs one all-reduce forward and one backward. Without a group (T = 1)
// each is a no-op, and a layer is the layer as written.
//
// Sequence parallelism (Korthikanti et al. 2022; Megatron-Core's *_sequence_parallel_region):
// outside the tensor-parallel regions each rank holds a chunk of the sequence, of (B, T', ...)
// the tokens [t T'/T, (t+1) T'/T): (B, T'/T, ...). The all-reduce pair becomes
//   into a column-parallel layer: forward all-gather the sequence (gather_sequence), backward
//     reduce-scatter the input gradient (reduce_scatter_sequence);
//   out of a row-parallel layer: forward reduce-scatter the partial outputs, backward all-gather
//     the output gradient;
// the same bytes on a ring as the all-reduce (which is a reduce-scatter and an all-gather).
// Where whole activations enter the region (the first transformer block after the embeddings)
// the rank takes its chunk (scatter_sequence), and backward all-gathers the gradient. The
// group's collectives move contiguous blocks per rank, (T, B, T'/T, ...); these reorder to and
// from (B, T', ...) around them (one copy per block; none when B = 1). The sums are those of the
// all-reduce, element by element in rank order, so every element has plain TP's bits.
#include <functional>
#include <memory>
#include <string_view>

#include "engine/core/op_params.h"
#include "engine/core/tensor.h"
#include "layers/tensor_parallel/group.h"

namespace pt {

// The sum over the group of a row-parallel layer's partial output, in place.
inline void all_reduce_output(const TensorParallel& tp, Backend& backend, const Tensor& y,
                              std::string_view what) {
  if (tp.enabled()) tp.group->all_reduce_sum(backend, y.f32(), y.numel(), what);
}

// The sum over the group of a column-parallel layer's input gradient, in place.
inline void all_reduce_input_gradient(const TensorParallel& tp, Backend& backend, const Tensor& dx,
                                      std::string_view what) {
  if (tp.enabled()) tp.group->all_reduce_sum(backend, dx.f32(), dx.numel(), what);
}

// A tensor whose collective is in flight (the started forms below): wait() waits for it, does
// what follows it on this thread (the reorder of a gathered sequence) and returns the result;
// until then the buffers it was started with belong to it. Destroying one that was not waited
// for waits for it, so that no collective outlives its buffers.
class PendingTensor {
 public:
  PendingTensor() = default;
  // `finish` runs after the collective, on the waiting thread, and gives the result (it holds
  // the buffers, so they live until then).
  PendingTensor(std::unique_ptr<PendingCollective> collective, std::function<Tensor()> finish);
  PendingTensor(PendingTensor&&) = default;
  PendingTensor& operator=(PendingTensor&&) = delete;
  ~PendingTensor();
  Tensor wait();

 private:
  std::unique_ptr<PendingCollective> collective_;
  std::function<Tensor()> finish_;
};

// all_reduce_input_gradient, started: dx is summed in place and returned by wait().
PendingTensor start_all_reduce_input_gradient(const TensorParallel& tp, Backend& backend,
                                              const Tensor& dx, std::string_view what);

// ---- sequence parallelism -------------------------------------------------------------------
// T' / T, the chunk of a sequence of T' tokens each rank holds; a ShapeError naming T', --tp and
// `layer` when T does not divide T'.
int64_t sequence_chunk(const TensorParallel& tp, int64_t sequence, std::string_view layer);
// context / T, the per-sample sequence length of a chunk of a layer built for `context` tokens;
// a ShapeError naming the context, --tp and `layer` when T does not divide it.
int64_t context_chunk(const TensorParallel& tp, int64_t context, std::string_view layer);

// x (B, T'/T, ...) on every rank -> (B, T', ...), the whole sequence (all-gather).
Tensor gather_sequence(const TensorParallel& tp, Backend& backend, const Tensor& x,
                       std::string_view what);
// y (B, T', ...), a partial sum on every rank -> (B, T'/T, ...): the sum over the ranks of
// this rank's chunk (reduce-scatter).
Tensor reduce_scatter_sequence(const TensorParallel& tp, Backend& backend, const Tensor& y,
                               std::string_view what);
// The two, started (the blocking ones run where they are called; both share one body).
PendingTensor start_gather_sequence(const TensorParallel& tp, Backend& backend, const Tensor& x,
                                    std::string_view what);
PendingTensor start_reduce_scatter_sequence(const TensorParallel& tp, Backend& backend,
                                            const Tensor& y, std::string_view what);
// x (B, T', ...), whole on every rank -> (B, T'/T, ...): this rank's chunk (no collective).
Tensor scatter_sequence(const TensorParallel& tp, Backend& backend, const Tensor& x,
                        std::string_view layer);

// Rank tp.rank's classes of a vocabulary split T ways (the embedding's table rows, the
// vocab-parallel loss's logits): UsageError for a rank that does not exist or T > 1 without a
// group, ShapeError naming the vocabulary and T (and padding as the fix) when they do not divide.
VocabRange vocab_range(int64_t vocab, const TensorParallel& tp, std::string_view what);

// The part of `whole` rank tp.rank holds, with a clear error when it does not divide.
int64_t split_size(const TensorParallel& tp, int64_t whole, std::string_view layer,
                   std::string_view what);

}  // namespace pt
