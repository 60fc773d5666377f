#pragma once
// A GPT-2 transformer block (pre-LayerNorm, no dropout):
//   x (B, T, d) -> x2 = x + attn(ln1(x))
//               -> y  = x2 + mlp(ln2(x2)),   mlp = Linear(d, r d) - GELU(tanh) - Linear(r d, d)
// with 1 <= T <= context (any shorter sequence is accepted). One block is one top-level layer
// of a Model, so the pipeline partitioner can cut between blocks.
//
// The sub-layers other than the attention are per-token (built for the per-sample shape (d) or
// (r d)) and see the sequence as (B T, channels) rows; the attention sees (B, T, d). Each
// sub-layer i uses ctx.child(i): 0 ln1, 1 attn, 2 ln2, 3 fc, 4 gelu, 5 proj.
//
// Backward (with g = gradients flowing backwards):
//   g_m = dy;  g_f = gelu'(fc out) * (g_m Wproj);  g_h2 = g_f Wfc;  g_x2 = dy + ln2'(g_h2)
//   g_h1 = attn'(g_x2);  dx = g_x2 + ln1'(g_h1)
// backward_input keeps g_f, g_h2, g_x2 and g_h1 in this layer's own saved slots (forward saves
// nothing here; the sub-layers save their own) because backward_weight, which zero-bubble
// schedules run later, feeds them to the sub-layers' backward_weight:
//   proj(dy), fc(g_f), ln2(g_h2), attn(g_x2), ln1(g_h1).
// Parameters (in this order): ln1.{weight,bias}, attn.{qkv,proj}.{weight,bias}, ln2.{weight,bias},
// mlp.fc.{weight,bias}, mlp.proj.{weight,bias}. Init (GPT-2): LayerNorm ones / zeros, Linear
// weights normal(0, 0.02), biases zero, and the two projections into the residual stream
// (attn.proj.weight, mlp.proj.weight) normal(0, residual_proj_std), which GPT-2 sets to
// 0.02 / sqrt(2 n_layers).
//
// Tensor parallelism (built with T ranks, Megatron-LM): the attention splits by heads
// (attention.h), the MLP's fc is column-parallel and its proj row-parallel with the GELU on the
// slice between them (layers/tensor_parallel/parallel_linear.h); the LayerNorms and the residual
// stream are whole on every rank. Two all-reduces forward, two backward per block.
//
// Sequence parallelism (tp.sequence_parallel with T > 1, Korthikanti et al. 2022): the block's
// output, its residual stream and both LayerNorms are this rank's chunk of the sequence,
// (B, T'/T, d) (T must divide the context and every micro-batch's T'). The attention and the
// MLP's fc all-gather the sequence before their GEMMs, the two projections reduce-scatter their
// partial outputs (layers/tensor_parallel/mappings.h): the same bytes as the all-reduces, and
// the LayerNorm / residual activations saved or live are 1/T of plain tensor parallelism's.
// The input is the previous block's chunk, or (the first block, built with input_chunk false)
// whole activations of which the block takes its chunk; backward then all-gathers dx, so the
// layers before it (the embeddings) see whole gradients as without sequence parallelism. The
// LayerNorms complete their parameter gradients over the group (layernorm.h).
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "layers/activation.h"
#include "layers/attention.h"
#include "layers/layer.h"
#include "layers/layernorm.h"
#include "layers/linear.h"
#include "layers/tensor_parallel/group.h"
#include "layers/tensor_parallel/parallel_linear.h"

namespace pt {

class TransformerBlock final : public Layer {
 public:
  static constexpr std::string_view kKind = "transformer_block";

  // Per-sample input (context, d_model). Throws ShapeError unless n_heads divides d_model.
  // With sequence parallelism, input_chunk: the input is already this rank's chunk
  // (context / T, d_model) (it follows another sequence-parallel block); otherwise the block
  // takes its chunk of the whole input. The output is a chunk either way.
  TransformerBlock(int64_t d_model, int64_t n_heads, int64_t context, int64_t mlp_ratio = 4,
                   float residual_proj_std = 0.02f, const TensorParallel& tp = {},
                   bool input_chunk = false);

  std::string_view kind() const override { return kKind; }
  int64_t d_model() const { return d_; }
  int64_t context() const { return context_; }
  const CausalSelfAttention& attention() const { return attn_; }
  // The same block built for rank tp.rank: its input and output whole on every rank, or with
  // sequence parallelism its output a chunk of the sequence (and its input too when the input
  // reaching it is one).
  std::unique_ptr<Layer> shard_for(const TensorParallel& tp, ActivationSplit input) const override;
  ActivationSplit output_split(ActivationSplit) const override { return {false, sequence()}; }
  // Whether the block runs on a chunk of the sequence.
  bool sequence() const { return tp_.splits_sequence(); }

  std::vector<ParamSpec> param_specs() const override;
  LayerCost cost() const override;
  // Checks like Layer::bind, then gives each sub-layer its slice of params and grads.
  void bind(std::span<const Tensor> params, std::span<const Tensor> grads) override;
  void unbind() override;

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;
  void backward_weight(const Tensor& dy, LayerContext& ctx) override;
  // Both, sub-layer by sub-layer (nothing kept in this layer's slots): with tensor parallelism
  // the fc's input-gradient collective runs while the proj's and the fc's weight gradients are
  // computed, the attention's while its own are (attention.h).
  Tensor backward(const Tensor& dy, LayerContext& ctx) override;
  // The LayerNorms' (sequence parallelism: their gradients summed over the ranks).
  void complete_gradients(Backend& backend) override;

 private:
  // The sub-layers in child-context order (ln1, attn, ln2, fc, gelu, proj).
  static constexpr size_t kParts = 6;
  std::array<Layer*, kParts> parts() { return {&ln1_, &attn_, &ln2_, &fc_, &gelu_, &proj_}; }
  std::array<const Layer*, kParts> parts() const {
    return {&ln1_, &attn_, &ln2_, &fc_, &gelu_, &proj_};
  }

  int64_t d_, context_, mlp_ratio_;
  float residual_proj_std_;
  TensorParallel tp_;
  bool scatter_input_;  // sequence parallelism on a whole input: take this rank's chunk
  LayerNorm ln1_;
  CausalSelfAttention attn_;
  LayerNorm ln2_;
  ColumnParallelLinear fc_;
  ActivationLayer gelu_;
  RowParallelLinear proj_;
};

}  // namespace pt
