#include "engine/core/arena.h"

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

size_t SizeTable::add(std::string name, Shape shape, DType dtype) {
  const size_t offset = (total_bytes_ + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  entries_.push_back({std::move(name), shape, dtype, offset});
  total_bytes_ = offset + bytes;
  // Keep the total a multiple of the alignment so the flat view has whole f32 elements.
  total_bytes_ = (total_bytes_ + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  return entries_.size() - 1;
}

Arena::Arena(Backend& backend, const SizeTable& table, bool zeroed) : table_(table) {
  const int64_t floats = static_cast<int64_t>(table.total_bytes() / sizeof(float));
  whole_ = zeroed ? backend.zeros(Shape{floats}, DType::f32) : backend.empty(Shape{floats});
}

Tensor Arena::view(size_t index) const {
  const SizeTableEntry& e = table_.entries().at(index);
  return whole_.view(e.offset, e.shape, e.dtype);
}

Tensor Arena::flat() const { return whole_; }

}  // namespace pt
