// The Backend's non-virtual members: tensors in its memory, and copies between backends.
#include "engine/core/backend.h"

#include <vector>

namespace pt {

Tensor Backend::empty(const Shape& shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  void* data = bytes ? allocate(bytes) : nullptr;
  auto storage = std::make_shared<Storage>(this, data, bytes);
  return Tensor(std::move(storage), data, shape, dtype, device());
}

Tensor Backend::copy_to(Backend& dst, const Tensor& src) {
  Tensor copy = dst.empty(src.shape(), src.dtype());
  // copy_to_peer orders the copy before later work of both devices (see backend.h).
  if (src.bytes()) copy_to_peer(dst, copy.data(), src.data(), src.bytes());
  return copy;
}

Tensor Backend::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  if (t.bytes()) {
    if (dtype == DType::f32) {
      fill(t.f32(), 0.f, t.numel());
    } else {
      std::vector<char> z(t.bytes(), 0);
      copy_from_host(t.data(), z.data(), z.size());
    }
  }
  return t;
}

}  // namespace pt
