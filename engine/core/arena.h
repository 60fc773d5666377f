#pragma once
// Arenas (llm.c style): a size table lists the tensors of one kind (parameters, gradients,
// optimizer state) with their offsets; one allocation holds them all, carved into views.
// Because every kind of a stage shares one layout, optimizer updates and gradient reductions
// run over the whole arena as one flat buffer (padding is zero and stays zero).
#include <string>
#include <vector>

#include "engine/core/backend.h"

namespace pt {

struct SizeTableEntry {
  std::string name;
  Shape shape;
  DType dtype = DType::f32;
  size_t offset = 0;  // bytes from the arena's start, aligned to kArenaAlignment
};

constexpr size_t kArenaAlignment = 64;

class SizeTable {
 public:
  // Appends an entry and returns its index.
  size_t add(std::string name, Shape shape, DType dtype = DType::f32);
  const std::vector<SizeTableEntry>& entries() const { return entries_; }
  size_t total_bytes() const { return total_bytes_; }

 private:
  std::vector<SizeTableEntry> entries_;
  size_t total_bytes_ = 0;
};

class Arena {
 public:
  Arena() = default;
  // One zero-filled allocation of table.total_bytes() on the backend; `zeroed` false leaves it
  // unwritten, for a caller that overwrites every byte (padding included) at once.
  Arena(Backend& backend, const SizeTable& table, bool zeroed = true);

  const SizeTable& table() const { return table_; }
  Tensor view(size_t index) const;
  // The whole arena as one flat f32 tensor (all entries must be f32).
  Tensor flat() const;
  size_t bytes() const { return table_.total_bytes(); }

 private:
  SizeTable table_;
  Tensor whole_;  // owns the allocation, shape (total_bytes,) of bytes viewed as f32 elements
};

}  // namespace pt
