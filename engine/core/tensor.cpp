#include "engine/core/tensor.h"

#include <fmt/format.h>

#include "engine/core/backend.h"  // Storage returns memory to its backend
#include "engine/core/error.h"

namespace pt {

Storage::~Storage() {
  if (backend != nullptr && data != nullptr) backend->deallocate(data, bytes);
}

float* Tensor::f32() const {
  if (dtype_ != DType::f32)
    throw UsageError(fmt::format("tensor {} is {}, not F32", shape_.str(), dtype_name(dtype_)));
  return static_cast<float*>(data_);
}

int32_t* Tensor::i32() const {
  if (dtype_ != DType::i32)
    throw UsageError(fmt::format("tensor {} is {}, not I32", shape_.str(), dtype_name(dtype_)));
  return static_cast<int32_t*>(data_);
}

bool Tensor::host_accessible() const {
  return backend() == nullptr || backend()->host_accessible();
}

Tensor Tensor::reshape(Shape shape) const {
  if (shape.numel() != numel())
    throw ShapeError(fmt::format("cannot reshape {} ({} elements) to {} ({} elements)",
                                 shape_.str(), numel(), shape.str(), shape.numel()));
  return Tensor(storage_, data_, shape, dtype_, device_);
}

Tensor Tensor::view(size_t byte_offset, Shape shape, DType dtype) const {
  const size_t want = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  if (byte_offset + want > bytes())
    throw ShapeError(
        fmt::format("a view of {} bytes at offset {} reaches past tensor {} ({} bytes)", want,
                    byte_offset, shape_.str(), bytes()));
  return Tensor(storage_, static_cast<char*>(data_) + byte_offset, shape, dtype, device_);
}

Tensor Tensor::slice_rows(int64_t first, int64_t count) const {
  if (shape_.rank() == 0 || first < 0 || count < 0 || first + count > shape_[0])
    throw ShapeError(
        fmt::format("rows [{}, {}) are outside tensor {}", first, first + count, shape_.str()));
  Shape s = shape_;
  s[0] = count;
  const int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  auto* base = static_cast<char*>(data_) + static_cast<size_t>(first * row) * dtype_size(dtype_);
  return Tensor(storage_, base, s, dtype_, device_);
}

}  // namespace pt
