#include "layers/embedding.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"
#include "layers/tensor_parallel/mappings.h"

namespace pt {

namespace {
// Ids of rank >= 1 per sample are a sequence (T, ...): forward also takes T' < T.
constexpr int kSequenceRank = 1;

}  // namespace

Embedding::Embedding(Shape in, int64_t vocab, int64_t dim, ParamInit init, const TensorParallel& tp)
    : Layer(std::string(kKind), in), vocab_(vocab), dim_(dim), init_(init), tp_(tp) {
  if (in.rank() >= Shape::kMaxRank - 1)
    throw ShapeError(fmt::format("embedding: expects ids of rank below {} (usually (T)) but got {}",
                                 Shape::kMaxRank - 1, in.str()));
  require_positive(kKind, "input size", in.numel());
  require_positive(kKind, "vocab", vocab);
  require_positive(kKind, "dim", dim);
  output_shape_ = in;
  output_shape_.push_back(dim);
  range_ = vocab_range(vocab, tp, kKind);
}

std::vector<ParamSpec> Embedding::param_specs() const {
  ParamSpec weight{"weight", Shape{range_.count, dim_}, init_, {}};
  if (tp_.enabled()) weight.shard = ParamShard{0, tp_.rank, tp_.size, 1, Shape{vocab_, dim_}};
  return {weight};
}

LayerCost Embedding::cost() const {
  const double n = static_cast<double>(input_shape_.numel());
  LayerCost c;
  c.forward_flops = 0;                                      // a gather
  c.backward_input_flops = 0;                               // nothing flows into ids
  c.backward_weight_flops = n * static_cast<double>(dim_);  // scatter-add
  c.activation_bytes = input_shape_.numel() * 4;            // the ids
  return c;
}

std::unique_ptr<Layer> Embedding::shard_for(const TensorParallel& tp, ActivationSplit input) const {
  if (!input.whole())
    throw ShapeError(fmt::format(
        "{} takes token ids, which every tensor-parallel rank holds whole, but follows a layer "
        "whose output is split across the ranks; close that split (a row-parallel layer, or a "
        "column-parallel one for a sequence split) before it",
        layer_label(*this)));
  if (style_ != ParallelStyle::vocab) return Layer::shard_for(tp, input);
  if (!tp.enabled()) return nullptr;  // one rank holds the whole table: the layer as written
  vocab_range(vocab_, tp, layer_label(*this));  // the refusal names this layer
  auto shard = std::make_unique<Embedding>(input_shape_, vocab_, dim_, init_, tp);
  shard->set_name(name_);
  shard->set_parallel_style(style_);
  return shard;
}

Tensor Embedding::forward(const Tensor& ids, LayerContext& ctx) {
  const Shape is =
      check_batched_sequence(*this, "input", ids, input_shape_, kSequenceRank, DType::i32);
  require_bound(*this);
  Shape ys = is;
  ys.push_back(dim_);
  Tensor y = ctx.alloc(ys);
  // y (n, dim) = W[ids (n)], n = B * T'; with T ranks: this rank's rows, zeros for the others'
  // ids, then the sum over the ranks.
  Backend& be = ctx.backend();
  if (tp_.enabled()) {
    be.embedding_forward_slice(ids.i32(), params_[0].f32(), y.f32(), ids.numel(), dim_, range_);
    all_reduce_output(tp_, be, y, "vocab-parallel embedding: rows of the table");
  } else {
    be.embedding_forward(ids.i32(), params_[0].f32(), y.f32(), ids.numel(), dim_, vocab_);
  }
  if (ctx.info().training) ctx.save(ids);
  return y;
}

Tensor Embedding::backward_input(const Tensor& dy, LayerContext& ctx) {
  (void)ctx;
  check_batched_sequence(*this, "gradient", dy, output_shape_, kSequenceRank);
  return Tensor();
}

void Embedding::backward_weight(const Tensor& dy, LayerContext& ctx) {
  const Shape dys = check_batched_sequence(*this, "gradient", dy, output_shape_, kSequenceRank);
  require_bound(*this);
  const Tensor& ids = saved_or_throw(*this, ctx, 0);
  if (dys.rows() != ids.numel())  // dy (n, dim) belongs to ids (n)
    throw ShapeError(
        fmt::format("{}: the gradient is {} but forward ran on ids {}; backward "
                    "needs the gradient of that same forward",
                    layer_label(*this), dys.str(), ids.shape().str()));
  // dW[ids[i]] += dy (i), i < n; with T ranks only the rank's rows (dW_t[ids[i] - first])
  if (tp_.enabled())
    ctx.backend().embedding_backward_weight_slice(ids.i32(), dy.f32(), grads_[0].f32(), ids.numel(),
                                                  dim_, range_);
  else
    ctx.backend().embedding_backward_weight(ids.i32(), dy.f32(), grads_[0].f32(), ids.numel(),
                                            dim_);
}

}  // namespace pt
