#pragma once
// The layer costs of a GPT we cannot run here, from its shape and a stated achieved FLOP/s
// (pipetrain-plan --gpt-layers ...): one table of one sample (a sequence of T tokens), which the
// cost file scales linearly to any micro-batch size.
//
// Layers: the embedding (tokens and positions), L transformer blocks, the head (final norm,
// un-tied projection to the vocabulary, loss). Per block and token, with width d and context T
// (multiply-add = 2 FLOPs; Narayanan et al. 2021, Megatron-LM at scale, eq. 3):
//   forward   24 d^2 (QKV 6 d^2, projection 2 d^2, MLP 16 d^2) + 4 T d (scores, values)
//   input     the same matmuls again, + 8 T d (attention's backward has no weights: all here)
//   weight    24 d^2
// Head per token: 2 d V each for F, I and W. Time = FLOPs / flops_per_second (the achieved rate
// includes every inefficiency; the embedding's gather is taken as free).
// Memory, 16-bit activations with a heads of 128 (Korthikanti et al. 2022, "Reducing activation
// recomputation", no recomputation): 34 T d + 5 a T^2 bytes per block and sequence; the boundary
// output 2 T d bytes; parameters as f32 bytes (12 d^2 + 13 d per block), so the planner's
// (2 + optimizer slots) x param bytes counts AdamW's 16 bytes per parameter.
#include <cstdint>
#include <vector>

#include "engine/partition/layer_costs.h"

namespace pt {

struct GptShape {
  int layers = 0;       // L transformer blocks
  int64_t width = 0;    // d
  int64_t context = 0;  // T tokens per sample
  int64_t vocab = 0;    // V
};

// Throws UsageError naming the flag for a non-positive size or rate (--gpt-layers, --gpt-width,
// --context, --vocab, --flops) or a width not a multiple of the 128-wide heads.
std::vector<LayerProfile> gpt_layer_costs(const GptShape& shape, double flops_per_second);

}  // namespace pt
