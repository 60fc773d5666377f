#pragma once
// Tensor: a typed view (pointer, shape, dtype, device) over memory that some Storage owns.
// Copying a Tensor shares its storage (reference counted); the memory goes back to its backend
// when the last view is gone. Views into arenas share the arena's storage. A Tensor made with
// Tensor::borrow owns nothing (host data the caller keeps alive, e.g. in tests).
#include <cstddef>
#include <memory>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/shape.h"

namespace pt {

class Backend;

// One allocation from a backend; returned to it on destruction.
struct Storage {
  Storage(Backend* backend, void* data, size_t bytes)
      : backend(backend), data(data), bytes(bytes) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Backend* backend;
  void* data;
  size_t bytes;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, void* data, Shape shape, DType dtype, DeviceId device)
      : storage_(std::move(storage)), data_(data), shape_(shape), dtype_(dtype), device_(device) {}

  // A non-owning view of host memory (device cpu:0 unless told otherwise).
  static Tensor borrow(void* data, Shape shape, DType dtype = DType::f32, DeviceId device = {}) {
    return Tensor(nullptr, data, shape, dtype, device);
  }

  bool defined() const { return data_ != nullptr; }
  void* data() const { return data_; }
  float* f32() const;
  int32_t* i32() const;

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  DeviceId device() const { return device_; }
  // The backend that owns the memory; nullptr for borrowed host memory.
  Backend* backend() const { return storage_ ? storage_->backend : nullptr; }
  // True when the host may read and write the memory directly: borrowed host memory, or a
  // backend whose memory is host memory (Backend::host_accessible).
  bool host_accessible() const;
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  // Same memory, another shape with the same element count (throws ShapeError otherwise).
  Tensor reshape(Shape shape) const;
  // A view of another shape and dtype starting byte_offset bytes in, sharing memory; throws
  // ShapeError when it would reach past this tensor's bytes.
  Tensor view(size_t byte_offset, Shape shape, DType dtype) const;
  // Rows [first, first + count) of the leading dimension, sharing memory.
  Tensor slice_rows(int64_t first, int64_t count) const;

 private:
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::f32;
  DeviceId device_;
};

}  // namespace pt
