#pragma once
// Input checks for the sequence layers of a transformer (position embedding, attention, block).
// These are built for a context length but accept any shorter sequence: x (B, T, C) with
// 1 <= T <= context, so one model serves batches of different lengths. (The other layers check
// the exact per-sample shape with check_batched in layer_checks.h.)
#include <cstdint>
#include <string_view>

#include "layers/layer.h"

namespace pt {

struct SequenceDims {
  int64_t B;  // batch
  int64_t T;  // sequence length of this call, 1 <= T <= context
};

// x must be (B, T, channels) f32 with 1 <= T <= context; throws ShapeError naming the layer,
// what was expected and what came. `what` is "input" or "gradient".
SequenceDims check_sequence(const Layer& layer, std::string_view what, const Tensor& x,
                            int64_t context, int64_t channels);

// Throws ShapeError when backward's gradient has another shape than forward's input had
// (backward must see the same B and T as the forward it belongs to).
void require_same_dims(const Layer& layer, const Shape& gradient, const Shape& forward_input);

}  // namespace pt
