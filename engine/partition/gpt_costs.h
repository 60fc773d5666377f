#pragma once
// The layer costs of a GPT we cannot run here, from its shape and a stated achieved FLOP/s
// (pipetrain-plan --gpt-layers ...): one table of one sample (a sequence of T tokens), which the
// cost file scales linearly to any micro-batch size; and the same for one of t tensor-parallel
// ranks (sharded_costs.h), Megatron's split (Shoeybi et al. 2019; Narayanan et al. 2021).
//
// Layers: the embedding (tokens and positions), L transformer blocks, the head (final norm,
// un-tied projection to the vocabulary, loss). Per block and token, with width d and context T
// (multiply-add = 2 FLOPs; Narayanan et al. 2021, Megatron-LM at scale, eq. 3):
//   forward   24 d^2 (QKV 6 d^2, projection 2 d^2, MLP 16 d^2) + 4 T d (scores, values)
//   input     the same matmuls again, + 8 T d (attention's backward has no weights: all here)
//   weight    24 d^2
// Head per token: 2 d V each for F, I and W. Time = FLOPs / flops_per_second (the achieved rate
// includes every inefficiency; the embedding's gather is taken as free).
// Memory, 16-bit activations with a heads (Korthikanti et al. 2022, "Reducing activation
// recomputation", no recomputation): 34 T d + 5 a T^2 bytes per block and sequence; the boundary
// output 2 T d bytes; parameters as f32 bytes (12 d^2 + 13 d per block), so the planner's
// (2 + optimizer slots) x param bytes counts AdamW's 16 bytes per parameter.
//
// Tensor parallelism over t ranks (one rank's share):
//   compute   every block's and the head's FLOPs / t (QKV and MLP-in split by columns, the
//             projection and MLP-out by rows, heads a / t per rank; the vocabulary V / t)
//   weights   12 d^2 / t + 13 d per block (norms and the row-split layers' biases replicated),
//             the embedding's V d / t + T d, the head's V d / t + 2 d
//   activations per block and sequence (Korthikanti et al. 2022, Table 2):
//             without sequence parallelism  10 T d + 24 T d / t + 5 a T^2 / t  (norms, dropouts
//             and the residual stream are replicated on every rank),
//             with it                       (34 T d + 5 a T^2) / t
//   boundary  2 T d / t bytes per rank: Megatron's scatter/gather sends each rank's 1/t over
//             its own NIC (and keeps a recomputed segment's input distributed the same way);
//             with sequence parallelism the output is sharded anyway
//   traffic   per block 2 all-reduces in F (after attention and after the MLP) and 2 in I (their
//             conjugates before QKV and MLP-in), each of T d 16-bit elements per sequence; with
//             sequence parallelism a reduce-scatter + all-gather each, the same ring bytes. The
//             embedding's vocabulary split all-reduces its output in F, the head its input's
//             gradient in I (the loss's per-token maxima and sums are negligible).
#include <cstdint>
#include <vector>

#include "engine/partition/layer_costs.h"
#include "engine/partition/sharded_costs.h"

namespace pt {

struct GptShape {
  int layers = 0;       // L transformer blocks
  int64_t width = 0;    // d
  int64_t context = 0;  // T tokens per sample
  int64_t vocab = 0;    // V
  int heads = 0;        // a attention heads; 0: heads of 128 (d / 128)
};

// Throws UsageError naming the flag for a non-positive size or rate (--gpt-layers, --gpt-width,
// --context, --vocab, --flops, --heads), a width not a multiple of the heads (of 128 when not
// given), or a tensor-parallel degree (--tensor-parallel) that does not divide the heads.
// gpt_layer_costs: one sequence, no tensor parallelism. gpt_sharded_costs: a micro-batch of
// `microbatch` sequences on one of t ranks (times and per-micro-batch bytes scale with it, as a
// cost file's tables do; parameters do not).
std::vector<LayerProfile> gpt_layer_costs(const GptShape& shape, double flops_per_second);
ShardedCosts gpt_sharded_costs(const GptShape& shape, double flops_per_second, int tensor_parallel,
                               bool sequence_parallel, int64_t microbatch);

// The heads a (shape.heads, or d / 128).
int gpt_heads(const GptShape& shape);

// Saved activation bytes of one block for one sequence on one of t ranks (the formulas above).
double gpt_block_activation_bytes(const GptShape& shape, int tensor_parallel,
                                  bool sequence_parallel);

// FLOPs of one training step of `batch` sequences as Narayanan et al. 2021 count them (eq. 3,
// with full activation recomputation: 4 passes over the blocks, 3 over the head):
//   96 B T L d^2 (1 + T / (6 d) + V / (16 L d))
// The figure their "TFLOP/s per GPU" divides by the step time and the GPUs.
double narayanan_flops_per_step(const GptShape& shape, int64_t batch);

}  // namespace pt
