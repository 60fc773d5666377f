#include "layers/transformer_block.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layer_checks.h"
#include "layers/sequence_checks.h"
#include "layers/tensor_parallel/mappings.h"

namespace pt {

namespace {

// Child contexts of the sub-layers.
enum Child : size_t { kLn1, kAttn, kLn2, kFc, kGelu, kProj };
// Parameter-name prefixes of the sub-layers, in the same order.
constexpr const char* kPrefix[] = {"ln1", "attn", "ln2", "mlp.fc", "mlp.gelu", "mlp.proj"};
// This layer's own saved slots (filled by backward_input).
enum Saved : size_t { kGradFc, kGradLn2, kGradX2, kGradLn1, kBackwardSaves };

// The MLP's hidden width r d, checked before the sub-layers are built with it.
int64_t mlp_width(int64_t d_model, int64_t mlp_ratio) {
  require_positive(TransformerBlock::kKind, "mlp_ratio", mlp_ratio);
  return mlp_ratio * d_model;
}

// The sequence-parallel chunk of the context (T must divide it).
int64_t block_chunk(const TensorParallel& tp, int64_t context) {
  require_positive(TransformerBlock::kKind, "context", context);
  return context_chunk(tp, context, TransformerBlock::kKind);
}

// The per-sample inputs of the MLP's linears: per token (d) / (r d / T), or with sequence
// parallelism sequences: fc takes the chunk (context / T, d), proj the gathered sequence.
Shape fc_input(const TensorParallel& tp, int64_t d, int64_t context) {
  return tp.splits_sequence() ? Shape{block_chunk(tp, context), d} : Shape{d};
}
Shape proj_input(const TensorParallel& tp, int64_t hidden, int64_t context) {
  return tp.splits_sequence() ? Shape{context, hidden / tp.size} : Shape{hidden / tp.size};
}

}  // namespace

TransformerBlock::TransformerBlock(int64_t d_model, int64_t n_heads, int64_t context,
                                   int64_t mlp_ratio, float residual_proj_std,
                                   const TensorParallel& tp, bool input_chunk)
    : Layer(std::string(kKind), Shape{context, d_model}),
      d_(d_model),
      context_(context),
      mlp_ratio_(mlp_ratio),
      residual_proj_std_(residual_proj_std),
      tp_(tp),
      scatter_input_(tp.splits_sequence() && !input_chunk),
      ln1_(Shape{d_model}, 1e-5f, tp),
      attn_(d_model, n_heads, context, residual_proj_std, tp),
      ln2_(Shape{d_model}, 1e-5f, tp),
      fc_(fc_input(tp, d_model, context), mlp_width(d_model, mlp_ratio), true, tp),
      gelu_(Shape{mlp_width(d_model, mlp_ratio) / tp.size}, Activation::gelu_tanh),
      proj_(proj_input(tp, mlp_width(d_model, mlp_ratio), context), mlp_width(d_model, mlp_ratio),
            d_model, true, tp) {
  // The sub-layers checked d_model, n_heads, context and the init std.
  output_shape_ = input_shape_;
  if (sequence()) {
    output_shape_[0] = block_chunk(tp, context);
    if (!scatter_input_) input_shape_ = output_shape_;
  }
}

std::unique_ptr<Layer> TransformerBlock::shard_for(const TensorParallel& tp,
                                                   ActivationSplit input) const {
  if (input.features)
    throw ShapeError(fmt::format(
        "{}: follows a column-parallel layer, but a transformer block takes the whole residual "
        "stream; close the pair with a row-parallel layer before it",
        layer_label(*this)));
  if (input.sequence && !tp.splits_sequence())
    throw ShapeError(fmt::format(
        "{}: its input is split along the sequence but the tensor-parallel group does not say "
        "sequence parallelism",
        layer_label(*this)));
  auto shard = std::make_unique<TransformerBlock>(d_, attn_.n_heads(), context_, mlp_ratio_,
                                                  residual_proj_std_, tp, input.sequence);
  shard->set_name(name_);
  return shard;
}

std::vector<ParamSpec> TransformerBlock::param_specs() const {
  std::vector<ParamSpec> specs;
  const auto ps = parts();
  for (size_t i = 0; i < kParts; ++i)
    for (ParamSpec s : ps[i]->param_specs()) {
      // GPT-2 init for the MLP instead of Linear's PyTorch default (attn has its own already).
      if (i == kFc || i == kProj)
        s.init = s.name == "bias" ? ParamInit::zeros()
                 : i == kFc       ? ParamInit::normal(0.02f)
                                  : ParamInit::normal(residual_proj_std_);
      s.name = fmt::format("{}.{}", kPrefix[i], s.name);
      specs.push_back(std::move(s));
    }
  return specs;
}

LayerCost TransformerBlock::cost() const {
  // Per-token sub-layers cost per token; the attention per sequence of `context` tokens. With
  // sequence parallelism the norms run on the chunk's tokens and the MLP's linears are built for
  // sequences (their costs are per sequence already).
  const int64_t local = output_shape_[0];  // tokens of the residual stream here
  LayerCost c;
  const auto ps = parts();
  for (size_t i = 0; i < kParts; ++i) {
    const LayerCost p = ps[i]->cost();
    int64_t times = context_;
    if (i == kAttn || (sequence() && (i == kFc || i == kProj))) times = 1;
    if (i == kLn1 || i == kLn2) times = local;
    c.forward_flops += static_cast<double>(times) * p.forward_flops;
    c.backward_input_flops += static_cast<double>(times) * p.backward_input_flops;
    c.backward_weight_flops += static_cast<double>(times) * p.backward_weight_flops;
    c.activation_bytes += times * p.activation_bytes;
  }
  const double n = static_cast<double>(local * d_);
  c.forward_flops += 2.0 * n;         // the two residual adds
  c.backward_input_flops += 2.0 * n;  // and their gradients
  return c;
}

void TransformerBlock::bind(std::span<const Tensor> params, std::span<const Tensor> grads) {
  Layer::bind(params, grads);  // checks counts and shapes against param_specs()
  size_t at = 0;
  for (Layer* l : parts()) {
    const size_t n = l->param_specs().size();
    l->bind(params.subspan(at, n), grads.subspan(at, n));
    at += n;
  }
}

void TransformerBlock::unbind() {
  Layer::unbind();
  for (Layer* l : parts()) l->unbind();
}

// ---- forward -------------------------------------------------------------------------------
// Below, Tl is the sequence length of the residual stream here: T' (all of it), or with
// sequence parallelism T'/T (this rank's chunk); the MLP's linears then take sequences (fc the
// chunk, which it gathers; proj the whole sequence, which it reduce-scatters), the GELU rows.
Tensor TransformerBlock::forward(const Tensor& x_in, LayerContext& ctx) {
  check_sequence(*this, "input", x_in, input_shape_[0], d_);
  require_bound(*this);
  Backend& be = ctx.backend();
  const Tensor x = scatter_input_ ? scatter_sequence(tp_, be, x_in, layer_label(*this)) : x_in;
  const int64_t B = x.shape()[0], Tl = x.shape()[1], hidden = mlp_width(d_, mlp_ratio_) / tp_.size;
  const Shape rows{B * Tl, d_}, seq{B, Tl, d_};
  // x2 = x + attn(ln1(x))
  const Tensor h1 = ln1_.forward(x.reshape(rows), ctx.child(kLn1));
  const Tensor a = attn_.forward(h1.reshape(seq), ctx.child(kAttn));
  Tensor x2 = ctx.alloc(seq);
  be.add(x.f32(), a.f32(), x2.f32(), x2.numel());
  // y = x2 + proj(gelu(fc(ln2(x2))))
  const Tensor h2 = ln2_.forward(x2.reshape(rows), ctx.child(kLn2));
  const Tensor f = fc_.forward(sequence() ? h2.reshape(seq) : h2, ctx.child(kFc));
  const Tensor g = gelu_.forward(f.reshape(Shape{f.numel() / hidden, hidden}), ctx.child(kGelu));
  const Tensor m = proj_.forward(g.reshape(f.shape()), ctx.child(kProj));
  Tensor y = ctx.alloc(seq);
  be.add(x2.f32(), m.f32(), y.f32(), y.numel());
  return y;
}

// ---- backward ------------------------------------------------------------------------------
Tensor TransformerBlock::backward_input(const Tensor& dy, LayerContext& ctx) {
  check_sequence(*this, "gradient", dy, output_shape_[0], d_);
  require_bound(*this);
  if (ctx.saved_count() != 0)
    throw UsageError(fmt::format("{}: backward_input ran twice on one context without clear()",
                                 layer_label(*this)));
  Backend& be = ctx.backend();
  const int64_t B = dy.shape()[0], Tl = dy.shape()[1],
                hidden = mlp_width(d_, mlp_ratio_) / tp_.size;
  const Shape rows{B * Tl, d_}, seq{B, Tl, d_};
  // The MLP branch: g_x2 = dy + ln2'(fc'(gelu'(proj'(dy))))
  const Tensor g_gelu = proj_.backward_input(sequence() ? dy : dy.reshape(rows), ctx.child(kProj));
  const Tensor g_fc =
      gelu_.backward_input(g_gelu.reshape(Shape{g_gelu.numel() / hidden, hidden}), ctx.child(kGelu))
          .reshape(g_gelu.shape());
  const Tensor g_ln2 = fc_.backward_input(g_fc, ctx.child(kFc)).reshape(rows);
  const Tensor d_ln2 = ln2_.backward_input(g_ln2, ctx.child(kLn2));
  Tensor g_x2 = ctx.alloc(seq);
  be.add(dy.f32(), d_ln2.f32(), g_x2.f32(), g_x2.numel());
  // The attention branch: dx = g_x2 + ln1'(attn'(g_x2))
  const Tensor g_ln1 = attn_.backward_input(g_x2, ctx.child(kAttn));
  const Tensor d_ln1 = ln1_.backward_input(g_ln1.reshape(rows), ctx.child(kLn1));
  Tensor dx = ctx.alloc(seq);
  be.add(g_x2.f32(), d_ln1.f32(), dx.f32(), dx.numel());
  // In Saved order, for backward_weight.
  ctx.save(g_fc);
  ctx.save(g_ln2);
  ctx.save(g_x2);
  ctx.save(g_ln1.reshape(rows));
  // A block that took its chunk of a whole input gives the whole gradient back.
  if (scatter_input_) return gather_sequence(tp_, be, dx, "transformer block: input gradient");
  return dx;
}

Tensor TransformerBlock::backward(const Tensor& dy, LayerContext& ctx) {
  if (!tp_.enabled()) return Layer::backward(dy, ctx);
  check_sequence(*this, "gradient", dy, output_shape_[0], d_);
  require_bound(*this);
  if (ctx.saved_count() != 0)
    throw UsageError(fmt::format("{}: backward ran on a context backward_input used already",
                                 layer_label(*this)));
  Backend& be = ctx.backend();
  const int64_t B = dy.shape()[0], Tl = dy.shape()[1],
                hidden = mlp_width(d_, mlp_ratio_) / tp_.size;
  const Shape rows{B * Tl, d_}, seq{B, Tl, d_};
  // The MLP branch, as backward_input; the proj's weight gradient (no collective: with sequence
  // parallelism its whole dy was gathered by its backward_input) and the fc's run while the
  // fc's input gradient is summed over the ranks.
  const Tensor dy_proj = sequence() ? dy : dy.reshape(rows);
  const Tensor g_gelu = proj_.backward_input(dy_proj, ctx.child(kProj));
  const Tensor g_fc =
      gelu_.backward_input(g_gelu.reshape(Shape{g_gelu.numel() / hidden, hidden}), ctx.child(kGelu))
          .reshape(g_gelu.shape());
  const Tensor g_ln2 =
      fc_.backward_overlapped(g_fc, ctx.child(kFc),
                              [&] { proj_.backward_weight(dy_proj, ctx.child(kProj)); })
          .reshape(rows);
  const Tensor d_ln2 = ln2_.backward(g_ln2, ctx.child(kLn2));
  Tensor g_x2 = ctx.alloc(seq);
  be.add(dy.f32(), d_ln2.f32(), g_x2.f32(), g_x2.numel());
  // The attention branch.
  const Tensor g_ln1 = attn_.backward(g_x2, ctx.child(kAttn));
  const Tensor d_ln1 = ln1_.backward(g_ln1.reshape(rows), ctx.child(kLn1));
  Tensor dx = ctx.alloc(seq);
  be.add(g_x2.f32(), d_ln1.f32(), dx.f32(), dx.numel());
  if (scatter_input_) return gather_sequence(tp_, be, dx, "transformer block: input gradient");
  return dx;
}

void TransformerBlock::complete_gradients(Backend& backend) {
  for (Layer* part : parts()) part->complete_gradients(backend);
}

void TransformerBlock::backward_weight(const Tensor& dy, LayerContext& ctx) {
  check_sequence(*this, "gradient", dy, output_shape_[0], d_);
  require_bound(*this);
  if (ctx.saved_count() != kBackwardSaves)
    throw UsageError(
        fmt::format("{}: backward_weight needs backward_input to run first on this "
                    "context (found {} of {} saved gradients)",
                    layer_label(*this), ctx.saved_count(), kBackwardSaves));
  require_same_dims(*this, dy.shape(), ctx.saved(kGradX2).shape());
  const int64_t B = dy.shape()[0], Tl = dy.shape()[1];
  proj_.backward_weight(sequence() ? dy : dy.reshape(Shape{B * Tl, d_}), ctx.child(kProj));
  fc_.backward_weight(ctx.saved(kGradFc), ctx.child(kFc));
  ln2_.backward_weight(ctx.saved(kGradLn2), ctx.child(kLn2));
  attn_.backward_weight(ctx.saved(kGradX2), ctx.child(kAttn));
  ln1_.backward_weight(ctx.saved(kGradLn1), ctx.child(kLn1));
}

}  // namespace pt
