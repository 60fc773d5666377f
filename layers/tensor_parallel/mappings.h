#pragma once
// The collectives between tensor-parallel regions (Megatron-Core's tensor_parallel/mappings.py),
// named by where they sit. Whole activations (replicated on every rank) and split ones (each rank
// its slice of the features) meet at two places:
//   into a column-parallel layer: forward nothing (every rank has the input); backward the input
//     gradients of the slices are summed (all_reduce_input_gradient);
//   out of a row-parallel layer: forward the partial outputs are summed (all_reduce_output);
//     backward nothing (every rank has the whole gradient).
// So a column/row pair costs one all-reduce forward and one backward. Without a group (T = 1)
// each is a no-op, and a layer is the layer as written.
#include <string_view>

#include "engine/core/tensor.h"
#include "layers/tensor_parallel/group.h"

namespace pt {

// The sum over the group of a row-parallel layer's partial output, in place.
inline void all_reduce_output(const TensorParallel& tp, Backend& backend, const Tensor& y,
                              std::string_view what) {
  if (tp.enabled()) tp.group->all_reduce_sum(backend, y.f32(), y.numel(), what);
}

// The sum over the group of a column-parallel layer's input gradient, in place.
inline void all_reduce_input_gradient(const TensorParallel& tp, Backend& backend, const Tensor& dx,
                                      std::string_view what) {
  if (tp.enabled()) tp.group->all_reduce_sum(backend, dx.f32(), dx.numel(), what);
}

// The part of `whole` rank tp.rank holds, with a clear error when it does not divide.
int64_t split_size(const TensorParallel& tp, int64_t whole, std::string_view layer,
                   std::string_view what);

}  // namespace pt
