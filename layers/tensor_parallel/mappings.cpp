#include "layers/tensor_parallel/mappings.h"

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

int64_t split_size(const TensorParallel& tp, int64_t whole, std::string_view layer,
                   std::string_view what) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size)
    throw ShapeError(
        fmt::format("{}: tensor-parallel rank {} of {} is not a rank", layer, tp.rank, tp.size));
  if (tp.enabled() && !tp.group)
    throw ShapeError(fmt::format("{}: tensor-parallel size {} needs a group", layer, tp.size));
  if (whole % tp.size != 0)
    throw ShapeError(fmt::format(
        "{}: {} ({}) does not split across {} tensor-parallel ranks; choose --tp dividing {}",
        layer, what, whole, tp.size, whole));
  return whole / tp.size;
}

}  // namespace pt
