#pragma once
// Causal multi-head self-attention (GPT-2's attn block without dropout):
//   x (B, T, d) -> qkv = x Wqkv^T + bqkv            (B, T, 3, H, Dh)   Wqkv (3d, d)
//               -> a = attention(qkv), causal       (B, T, H, Dh) = (B, T, d)
//               -> y = a Wproj^T + bproj            (B, T, d)          Wproj (d, d)
// with H = n_heads, Dh = d / H, softmax scale 1/sqrt(Dh) and 1 <= T <= context (any shorter
// sequence is accepted; positions never see later ones).
// The attention itself is the backend op attention_forward / attention_backward (memory-
// efficient: it saves the per-row log-sum-exp, not the (T, T) probabilities).
//
// Saved by forward: x, qkv, a, lse (B, H, T). backward_input computes dqkv on its way to dx and
// keeps it in the context, so backward_weight (possibly much later, zero-bubble schedules) can
// form dWqkv without redoing the attention backward:
//   da = dy Wproj;  dqkv = attention_backward(da);  dx = dqkv Wqkv
//   dWproj += dy^T a;  dbproj += sum dy;  dWqkv += dqkv^T x;  dbqkv += sum dqkv
// Parameters: "qkv.weight", "qkv.bias", "proj.weight", "proj.bias". Init (GPT-2): weights
// normal(0, 0.02), proj.weight normal(0, proj_init_std) (GPT-2: 0.02 / sqrt(2 n_layers), as it
// writes into the residual stream), biases zero.
//
// Tensor parallelism (built with a TensorParallel of T ranks, Megatron-LM): the heads split
// across the ranks, rank t computing heads [t H/T, (t+1) H/T). QKV is column-parallel (rank t
// holds the q, k and v rows of its heads: Wqkv's dimension 0 is 3 blocks, each split in T),
// the output projection row-parallel (Wproj's columns of its heads); the partial outputs are
// summed (one all-reduce) before the bias, which every rank holds whole, and the input gradient
// is summed in backward (the other all-reduce). x, dy and y are whole on every rank.
//
// Sequence parallelism (tp.sequence_parallel with T > 1; layers/tensor_parallel/mappings.h):
// x, y and dy are this rank's chunk (B, T'/T, d) of the sequence (the per-sample shape
// (context / T, d); T must divide the context and T'). Forward all-gathers x before the QKV
// GEMM (and saves only its chunk: backward_weight gathers x again for dWqkv, as Megatron-Core
// does, so the saved input is divided by T) and reduce-scatters the projection's partial
// output, then adds the bias to the chunk; backward all-gathers dy (kept for dWproj and the
// bias gradient, which so sum the whole sequence as without it) and reduce-scatters dx.
#include <cstdint>
#include <functional>
#include <string_view>

#include "layers/layer.h"
#include "layers/tensor_parallel/group.h"

namespace pt {

class CausalSelfAttention final : public Layer {
 public:
  static constexpr std::string_view kKind = "causal_self_attention";

  // Per-sample input (context, d_model). Throws ShapeError unless n_heads divides d_model.
  CausalSelfAttention(int64_t d_model, int64_t n_heads, int64_t context,
                      float proj_init_std = 0.02f, const TensorParallel& tp = {});

  std::string_view kind() const override { return kKind; }
  int64_t d_model() const { return d_; }
  int64_t n_heads() const { return H_; }
  int64_t head_dim() const { return d_ / H_; }
  float proj_init_std() const { return proj_init_std_; }
  // The heads and channels this rank computes (all of them without tensor parallelism).
  int64_t local_heads() const { return H_ / tp_.size; }
  int64_t local_width() const { return d_ / tp_.size; }
  int64_t context() const { return context_; }
  // Whether x and y are chunks of the sequence (sequence parallelism).
  bool sequence() const { return tp_.splits_sequence(); }

  std::vector<ParamSpec> param_specs() const override;
  LayerCost cost() const override;

  Tensor forward(const Tensor& x, LayerContext& ctx) override;
  Tensor backward_input(const Tensor& dy, LayerContext& ctx) override;
  void backward_weight(const Tensor& dy, LayerContext& ctx) override;
  // Both, overlapped with tensor parallelism: dx's all-reduce (reduce-scatter) runs while the
  // weight gradients are computed, and with sequence parallelism x's re-gather while dx is.
  Tensor backward(const Tensor& dy, LayerContext& ctx) override;

 private:
  // The pieces the three share. dy and x: whole sequences (gathered with sequence parallelism).
  // dx before the sum over the ranks; dqkv is kept for the weight gradients.
  Tensor partial_input_gradient(const Tensor& dy, LayerContext& ctx, Tensor& dqkv) const;
  void weight_gradients(const Tensor& dy, const Tensor& dqkv, const std::function<Tensor()>& x,
                        LayerContext& ctx);
  // forward's saved input, checked against the gradient dy_in (as given to backward).
  const Tensor& saved_input(const Tensor& dy_in, LayerContext& ctx) const;

  int64_t d_, H_, context_;
  float proj_init_std_;
  TensorParallel tp_;
};

}  // namespace pt
