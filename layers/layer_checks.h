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

// Throws UsageError when bind() has not given the layer its parameters yet (call it only in
// layers that have parameters).
void require_bound(const Layer& layer);

// ctx.saved(i), or a UsageError saying that forward saved nothing for backward (it ran in
// evaluation mode, or the context was cleared) instead of an out_of_range.
const Tensor& saved_or_throw(const Layer& layer, const LayerContext& ctx, size_t i);

}  // namespace pt
