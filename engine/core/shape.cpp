#include "engine/core/shape.h"

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

Shape::Shape(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) push_back(d);
}

void Shape::push_back(int64_t d) {
  if (rank_ == kMaxRank)
    throw ShapeError(fmt::format("shape {} would exceed the maximum rank {}", str(), kMaxRank));
  dims_[static_cast<size_t>(rank_++)] = d;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<size_t>(i)];
  return n;
}

Shape Shape::with_batch(int64_t batch) const {
  Shape s;
  s.push_back(batch);
  for (int i = 0; i < rank_; ++i) s.push_back(dims_[static_cast<size_t>(i)]);
  return s;
}

Shape Shape::drop_first() const {
  Shape s;
  for (int i = 1; i < rank_; ++i) s.push_back(dims_[static_cast<size_t>(i)]);
  return s;
}

std::string Shape::str() const {
  std::string out = "(";
  for (int i = 0; i < rank_; ++i) {
    if (i) out += ", ";
    out += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  return out + ")";
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[static_cast<size_t>(i)] != o.dims_[static_cast<size_t>(i)]) return false;
  return true;
}

}  // namespace pt
