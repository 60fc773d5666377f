#include "layers/tensor_parallel/vocab_parallel_embedding.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/embedding.h"
#include "layers/layer_checks.h"
#include "layers/tensor_parallel/mappings.h"

namespace pt {

namespace {

// Ids of rank >= 1 per sample are a sequence (T, ...): forward also takes T' < T (Embedding's).
constexpr int kSequenceRank = 1;

// This rank's rows of the table, or a ShapeError naming the vocabulary and T when they differ
// in size (Megatron pads the vocabulary instead; we leave that to the model's definition).
VocabRange rows_of(std::string_view name, int64_t vocab, const TensorParallel& tp) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size)
    throw UsageError(fmt::format("embedding '{}': tensor-parallel rank {} of {} does not exist",
                                 name, tp.rank, tp.size));
  if (tp.enabled() && tp.group == nullptr)
    throw UsageError(fmt::format(
        "embedding '{}': built for {} tensor-parallel ranks without a group to sum over", name,
        tp.size));
  if (vocab % tp.size != 0)
    throw ShapeError(fmt::format(
        "embedding '{}': the vocabulary of {} tokens does not split into {} equal "
        "tensor-parallel slices ({} % {} = {}); choose --tp dividing the vocabulary, or pad the "
        "vocabulary to a multiple of {}",
        name, vocab, tp.size, vocab, tp.size, vocab % tp.size, tp.size));
  const int64_t count = vocab / tp.size;
  return VocabRange{tp.rank * count, count, vocab};
}

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(std::string name, Shape in, int64_t vocab,
                                               int64_t dim, ParamInit init,
                                               const TensorParallel& tp)
    : Layer(std::move(name), in), vocab_(vocab), dim_(dim), init_(init), tp_(tp) {
  // The whole layer's checks and output shape, from the Embedding it is a slice of.
  const Embedding whole(in, vocab, dim, init);
  output_shape_ = whole.output_shape();
  range_ = rows_of(name_, vocab, tp);
}

std::string_view VocabParallelEmbedding::kind() const { return Embedding::kKind; }

std::vector<ParamSpec> VocabParallelEmbedding::param_specs() const {
  ParamSpec weight{"weight", Shape{range_.count, dim_}, init_, {}};
  if (tp_.enabled()) weight.shard = ParamShard{0, tp_.rank, tp_.size, 1, Shape{vocab_, dim_}};
  return {weight};
}

// The Embedding's costs: the all-reduce is communication, priced by whoever plans the group;
// the scatter-add touches ~1/T of the positions, but which ones depends on the data.
LayerCost VocabParallelEmbedding::cost() const {
  return Embedding(input_shape_, vocab_, dim_, init_).cost();
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids, LayerContext& ctx) {
  const Shape is =
      check_batched_sequence(*this, "input", ids, input_shape_, kSequenceRank, DType::i32);
  require_bound(*this);
  Shape ys = is;
  ys.push_back(dim_);
  Tensor y = ctx.alloc(ys);
  // y (n, dim): this rank's rows, zeros for the others' ids; then the sum over the ranks.
  ctx.backend().embedding_forward_slice(ids.i32(), params_[0].f32(), y.f32(), ids.numel(), dim_,
                                        range_);
  all_reduce_output(tp_, ctx.backend(), y, "vocab-parallel embedding: rows of the table");
  if (ctx.info().training) ctx.save(ids);
  return y;
}

Tensor VocabParallelEmbedding::backward_input(const Tensor& dy, LayerContext& ctx) {
  (void)ctx;
  check_batched_sequence(*this, "gradient", dy, output_shape_, kSequenceRank);
  return Tensor();
}

void VocabParallelEmbedding::backward_weight(const Tensor& dy, LayerContext& ctx) {
  const Shape dys = check_batched_sequence(*this, "gradient", dy, output_shape_, kSequenceRank);
  require_bound(*this);
  const Tensor& ids = saved_or_throw(*this, ctx, 0);
  if (dys.rows() != ids.numel())  // dy (n, dim) belongs to ids (n)
    throw ShapeError(
        fmt::format("{}: the gradient is {} but forward ran on ids {}; backward "
                    "needs the gradient of that same forward",
                    layer_label(*this), dys.str(), ids.shape().str()));
  // dW_t[ids[i] - first] += dy (i) for this rank's ids
  ctx.backend().embedding_backward_weight_slice(ids.i32(), dy.f32(), grads_[0].f32(), ids.numel(),
                                                dim_, range_);
}

}  // namespace pt
