#pragma once
// Checks shared by the layers: sizes, input tensors, bound parameters, saved activations.
// Every error names the layer, says what was expected and what came (STYLE.md).
#include <cstdint>
#include <string>
#include <string_view>

#include "layers/layer.h"

namespace pt {

// "linear" or "linear 'fc1'" (the name only when it differs from the kind).
std::string layer_label(const Layer& layer);

// "(B, 28, 28)" for the per-sample shape (28, 28); "(B)" for ().
std::string batched_str(const Shape& per_sample);

// Throws ShapeError "<kind>: <what> must be positive but got <value>" when value <= 0.
void require_positive(std::string_view kind, std::string_view what, int64_t value);

// Throws ShapeError "<kind>: expects input <want> but got <shape>" when the per-sample input
// shape is not `want`.
void require_rank(std::string_view kind, const Shape& in, int rank, std::string_view want);

// x must be (B, ...per_sample) of the given dtype; returns B. `what` is "input" or "gradient".
int64_t check_batched(const Layer& layer, std::string_view what, const Tensor& x,
                      const Shape& per_sample, DType dtype = DType::f32);

// For layers that also run on shorter sequences (Embedding, and Linear/LayerNorm on (T, C)):
// when per_sample has at least `sequence_rank` dimensions, its first one is a sequence length T
// and x may be (B, T', ...rest) with 1 <= T' <= T; otherwise x must be exactly (B, ...per_sample)
// as in check_batched (same messages). Returns x's shape, so callers size their output and rows
// from what came rather than from what the layer was built for.
Shape check_batched_sequence(const Layer& layer, std::string_view what, const Tensor& x,
                             const Shape& per_sample, int sequence_rank, DType dtype = DType::f32);

// Throws ShapeError when backward's gradient and forward's saved input differ in the number of
// rows (B times T'): backward needs the gradient of that same forward.
void require_same_rows(const Layer& layer, const Shape& gradient, const Shape& forward_input);

// Throws UsageError when bind() has not given the layer its parameters yet (call it only in
// layers that have parameters).
void require_bound(const Layer& layer);

// ctx.saved(i), or a UsageError saying that forward saved nothing for backward (it ran in
// evaluation mode, or the context was cleared) instead of an out_of_range.
const Tensor& saved_or_throw(const Layer& layer, const LayerContext& ctx, size_t i);

}  // namespace pt
