#include "layers/zoo.h"

#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "layers/layers.h"

namespace pt {

namespace {

// Hidden linear i of n under tensor parallelism: pairs (column, row), Megatron's MLP; an odd
// last one stays whole.
ParallelStyle hidden_style(int i, int n) {
  if (i % 2 == 1) return ParallelStyle::row;
  return i + 1 < n ? ParallelStyle::column : ParallelStyle::replicated;
}

}  // namespace

Model fashion_mlp() { return deep_mlp(4, 1024); }

Model fashion_cnn() {
  return ModelBuilder({1, 28, 28})
      .conv2d(32, 3, 1, 1)
      .relu()
      .max_pool(2)
      .conv2d(64, 3, 1, 1)
      .relu()
      .max_pool(2)
      .flatten()
      .linear(128)
      .relu()
      .linear(10)
      .cross_entropy()
      .build();
}

Model deep_mlp(int hidden_layers, int64_t width, Shape input) {
  ModelBuilder b(input);
  b.flatten();
  for (int i = 0; i < hidden_layers; ++i)
    b.linear(width).parallel(hidden_style(i, hidden_layers)).relu();
  return b.linear(10).cross_entropy().build();
}

Model gpt(int64_t vocab, int64_t context, int64_t d_model, int n_layers, int n_heads,
          bool tie_weights) {
  if (n_layers < 1)
    throw ShapeError(fmt::format("gpt: n_layers must be positive but got {}", n_layers));
  ModelBuilder b(Shape{context}, DType::i32);
  // GPT-2 initialises the token embedding normal(0, 0.02), not PyTorch's normal(0, 1): with the
  // position embedding at the same scale neither drowns the other at the start.
  b.add(std::make_unique<Embedding>(Shape{context}, vocab, d_model, ParamInit::normal(0.02f)))
      .name("tok_emb")
      .parallel(ParallelStyle::vocab);
  b.add(std::make_unique<PositionEmbedding>(context, d_model)).name("pos_emb");
  // GPT-2: projections into the residual stream start at 0.02 / sqrt(2 n_layers), so the
  // stream's variance does not grow with depth.
  const float residual_proj_std = 0.02f / std::sqrt(2.f * static_cast<float>(n_layers));
  for (int i = 0; i < n_layers; ++i)
    b.add(std::make_unique<TransformerBlock>(d_model, n_heads, context, 4, residual_proj_std))
        .name(fmt::format("block{}", i));
  b.layer_norm().name("ln_f");
  // Split by vocabulary under tensor parallelism: the logits stay split and feed the
  // vocab-parallel loss (never gathered).
  b.linear(vocab, /*bias=*/false).name("lm_head").parallel(ParallelStyle::column);
  Model m = b.cross_entropy().build();
  // GPT-2 shares lm_head.weight (vocab, d) with tok_emb.weight. Each layer keeps a copy (they are
  // usually on different stages); the engine sums their gradients and keeps them equal.
  if (tie_weights) m.tie(0, "weight", m.num_layers() - 1, "weight");
  return m;
}

}  // namespace pt
