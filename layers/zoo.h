#pragma once
// Models used by the examples, tests and benchmarks, defined once.
#include "layers/builder.h"

namespace pt {

// Each model declares its tensor-parallel split (used with --tp T > 1; shard_model.h): the MLPs'
// hidden linears in (column, row) pairs, the GPT's token embedding and LM head by vocabulary.
//
// Fashion-MNIST MLP: 784-1024-1024-1024-1024-10 with ReLU (flatten first): deep_mlp(4, 1024).
Model fashion_mlp();
// Fashion-MNIST CNN: conv(32,3,pad 1)-relu-maxpool(2)-conv(64,3,pad 1)-relu-maxpool(2)-
// flatten-linear(128)-relu-linear(10).
Model fashion_cnn();
// A deeper MLP for pipeline tests: flatten, then `hidden_layers` x (linear(width)-relu), then
// linear(10): 2 * hidden_layers + 2 layers in all.
Model deep_mlp(int hidden_layers, int64_t width, Shape input = {1, 28, 28});
// A GPT-2 style language model on token ids (context) int32, next-token targets (context):
//   tok_emb Embedding(vocab, d) - pos_emb PositionEmbedding(context, d) -
//   block0 .. block{n_layers-1} TransformerBlock(d, n_heads) - ln_f LayerNorm -
//   lm_head Linear(d, vocab, no bias),  loss SoftmaxCrossEntropy over (context, vocab).
// Each block is one top-level layer, so the partitioner can cut between blocks. Throws
// ShapeError for sizes that do not fit (n_heads must divide d_model). tie_weights: lm_head and
// tok_emb share one (vocab, d) weight (Model::tie), as in GPT-2.
Model gpt(int64_t vocab, int64_t context, int64_t d_model, int n_layers, int n_heads,
          bool tie_weights = true);

}  // namespace pt
