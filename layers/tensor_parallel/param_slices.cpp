#include "layers/tensor_parallel/param_slices.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

namespace {

// The whole parameter seen as (outer, groups, ranks, part, inner): dim = groups x ranks x part
// elements, each rank's slice is (outer, groups, part, inner) of it.
struct SliceGeometry {
  int64_t outer = 1, groups = 1, ranks = 1, part = 1, inner = 1;
};

SliceGeometry geometry(const Shape& whole, const ParamShard& shard) {
  if (shard.dim < 0 || shard.dim >= whole.rank())
    throw ShapeError(
        fmt::format("a parameter {} has no dimension {} to split", whole.str(), shard.dim));
  SliceGeometry g;
  g.groups = shard.groups;
  g.ranks = shard.ranks;
  const int64_t n = whole[shard.dim];
  if (shard.groups < 1 || shard.ranks < 1 || shard.rank < 0 || shard.rank >= shard.ranks ||
      n % (g.groups * g.ranks) != 0)
    throw ShapeError(fmt::format(
        "a parameter {}: dimension {} ({}) does not split into {} group(s) x {} ranks; choose a "
        "tensor-parallel size dividing it",
        whole.str(), shard.dim, n, shard.groups, shard.ranks));
  g.part = n / (g.groups * g.ranks);
  for (int d = 0; d < shard.dim; ++d) g.outer *= whole[d];
  for (int d = shard.dim + 1; d < whole.rank(); ++d) g.inner *= whole[d];
  return g;
}

// Calls copy(whole_offset, slice_offset, count) for every contiguous run of the slice.
template <class Copy>
void for_each_run(const Shape& whole, const ParamShard& shard, Copy copy) {
  const SliceGeometry g = geometry(whole, shard);
  const int64_t run = g.part * g.inner;
  int64_t at = 0;
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t k = 0; k < g.groups; ++k) {
      const int64_t from = ((o * g.groups + k) * g.ranks + shard.rank) * run;
      copy(from, at, run);
      at += run;
    }
}

void check_sizes(std::span<const float> whole, std::span<const float> slice,
                 const ParamShard& shard) {
  const Shape s = slice_shape(shard.whole, shard);
  if (static_cast<int64_t>(whole.size()) != shard.whole.numel() ||
      static_cast<int64_t>(slice.size()) != s.numel())
    throw ShapeError(fmt::format("a slice of {} is {} values and the whole {}, not {} and {}",
                                 shard.whole.str(), s.numel(), shard.whole.numel(), slice.size(),
                                 whole.size()));
}

}  // namespace

Shape slice_shape(const Shape& whole, const ParamShard& shard) {
  const SliceGeometry g = geometry(whole, shard);
  Shape s = whole;
  s[shard.dim] = g.groups * g.part;
  return s;
}

void take_slice(std::span<const float> whole, const ParamShard& shard, std::span<float> slice) {
  check_sizes(whole, slice, shard);
  for_each_run(shard.whole, shard, [&](int64_t from, int64_t to, int64_t n) {
    std::copy_n(whole.begin() + from, n, slice.begin() + to);
  });
}

void put_slice(std::span<const float> slice, const ParamShard& shard, std::span<float> whole) {
  check_sizes(whole, slice, shard);
  for_each_run(shard.whole, shard, [&](int64_t from, int64_t to, int64_t n) {
    std::copy_n(slice.begin() + to, n, whole.begin() + from);
  });
}

}  // namespace pt
