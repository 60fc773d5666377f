#pragma once
// A tensor-parallel parameter's slice of the whole parameter (ParamShard in layers/layer.h), as
// index arithmetic on row-major host buffers: taking a rank's slice (initial values: every rank
// draws the whole parameter from the same counter-based generator and keeps its slice, so a
// model starts the same at any T) and putting it back (a checkpoint stores whole parameters,
// which load at any other T).
#include <cstdint>
#include <span>

#include "layers/layer.h"

namespace pt {

// slice (shard's shape, derived from `whole_shape` and the shard) := rank shard.rank's part.
void take_slice(std::span<const float> whole, const ParamShard& shard, std::span<float> slice);
// The inverse: writes `slice` into its place in `whole`.
void put_slice(std::span<const float> slice, const ParamShard& shard, std::span<float> whole);
// The shape a rank holds of `whole` split as `shard` says; throws ShapeError when the dimension
// does not divide into groups x ranks equal parts.
Shape slice_shape(const Shape& whole, const ParamShard& shard);

}  // namespace pt
