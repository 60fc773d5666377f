// The Backend's non-virtual helpers: tensors in its memory, and copies between any two backends.
// The staging through host memory for backends that cannot reach each other is written here,
// once: each backend's copy_to_peer handles only its own kind and knows no other backend.
#include "engine/core/backend.h"

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

namespace {

// The host clock once the queued work is done.
class HostTimingEvent final : public TimingEvent {
 public:
  double seconds_since(TimingEvent& earlier) override {
    const auto* e = dynamic_cast<const HostTimingEvent*>(&earlier);
    if (!e)
      throw std::logic_error("TimingEvent::seconds_since: the events come from different backends");
    return std::chrono::duration<double>(at_ - e->at_).count();
  }

 private:
  std::chrono::steady_clock::time_point at_ = std::chrono::steady_clock::now();
};

}  // namespace

std::unique_ptr<TimingEvent> Backend::record_timing_event() {
  synchronize();
  return std::make_unique<HostTimingEvent>();
}

Tensor Backend::empty(const Shape& shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  void* data = bytes ? allocate(bytes) : nullptr;
  auto storage = std::make_shared<Storage>(this, data, bytes);
  return Tensor(std::move(storage), data, shape, dtype, device());
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

Tensor Backend::copy_to(Backend& dst, const Tensor& src) {
  Tensor copy = dst.empty(src.shape(), src.dtype());
  copy_to(dst, copy.data(), src.data(), src.bytes());
  return copy;
}

void Backend::copy_to(Backend& dst_backend, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (&dst_backend == this) {
    copy_within(dst, src, bytes);
    return;
  }
  // The peer copy orders itself before later work of both devices (see backend.h).
  if (copy_to_peer(dst_backend, dst, src, bytes)) return;
  // Through the host. copy_to_host returns with the bytes on the host, and copy_from_host lets
  // the caller reuse its source at once, so each step below is complete or safely queued.
  if (host_accessible()) {
    synchronize();  // the work that produced src has finished writing it
    dst_backend.copy_from_host(dst, src, bytes);
  } else if (dst_backend.host_accessible()) {
    dst_backend.synchronize();  // work queued there may still read the bytes we overwrite
    copy_to_host(dst, src, bytes);
  } else {
    std::vector<std::byte> host(bytes);
    copy_to_host(host.data(), src, bytes);
    dst_backend.copy_from_host(dst, host.data(), bytes);
  }
}

void require_in_place_or_disjoint(const char* op, const float* param, const float* param_out,
                                  int64_t n) {
  if (param == param_out || n <= 0) return;
  // Compared as addresses: the buffers may be unrelated allocations.
  const auto a = reinterpret_cast<uintptr_t>(param), b = reinterpret_cast<uintptr_t>(param_out);
  const auto bytes = static_cast<uintptr_t>(n) * sizeof(float);
  if (a < b + bytes && b < a + bytes)
    throw UsageError(fmt::format(
        "{}: param_out overlaps param without being the same buffer; pass the same pointer to "
        "update in place, or a separate buffer of {} floats",
        op, n));
}

}  // namespace pt
