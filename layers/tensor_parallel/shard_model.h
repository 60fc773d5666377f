#pragma once
// A model as tensor-parallel rank tp.rank of tp.size holds it (torchtitan's parallelize_module
// with the plan written on the layers): the model is written once, each layer declares how it
// splits (Layer::parallel_style, or a composite layer's own split such as the transformer
// block's), and every rank builds its shard from the same definition.
//
// Walking the layers in order, with "split" (ActivationSplit, layers/layer.h) = how the
// activation is split: a slice of its features (after a column-parallel layer) and/or a chunk of
// the sequence (sequence parallelism: after a transformer block built with tp.sequence_parallel;
// the first such block takes its chunk of the whole activation, per-token layers such as a
// LayerNorm are rebuilt for the chunk, a column-parallel layer gathers the sequence):
//   a layer's shard_for(tp, split) gives its shard (or nullptr: it stays, whole, a replica);
//   after it, split = the shard's output_split(split);
//   the loss takes the last activation: split features (a column-parallel LM head) give the
//   vocab-parallel loss; a sequence chunk is refused.
// Layer indices, parameter names and shapes are the same with or without sequence parallelism
// (only activations are chunked), so checkpoints do not see it.
// Ties and skips are kept (tied parameters split alike). The sharded model's signature() is the
// whole model's, so checkpoints (which store whole parameters) load at any T.
#include <string>
#include <vector>

#include "layers/model.h"
#include "layers/tensor_parallel/group.h"

namespace pt {

// tp.size == 1 returns the model unchanged. `replicated` (optional) receives "index 'name'" of
// the layers with parameters that declare nothing and stay whole on every rank (said once by the
// caller: their compute is repeated T times). Throws ShapeError naming the layer when a split
// cannot be made (a size that does not divide, a pair left open, a layer that cannot take a
// slice).
Model shard_model(Model model, const TensorParallel& tp,
                  std::vector<std::string>* replicated = nullptr);

}  // namespace pt
