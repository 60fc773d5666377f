#pragma once
// Helpers for the kernel tests: device buffers filled from host vectors, seeded random inputs,
// and a closeness check |got - ref| <= atol + rtol |ref| against a double-precision reference
// that reports the worst element.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/core/random.h"
#include "kernels/cpu/cpu_backend.h"

namespace pt::test {

// A tensor on the backend holding a copy of host data; read() copies it back.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer(Backend& backend, const std::vector<T>& host)
      : backend_(&backend),
        tensor_(backend.empty(Shape{static_cast<int64_t>(host.size())},
                              sizeof(T) == 4 && std::is_integral_v<T> ? DType::i32 : DType::f32)) {
    backend.copy_from_host(tensor_.data(), host.data(), host.size() * sizeof(T));
  }
  DeviceBuffer(Backend& backend, size_t n, T value)
      : DeviceBuffer(backend, std::vector<T>(n, value)) {}

  T* get() const { return static_cast<T*>(tensor_.data()); }
  std::vector<T> read() const {
    std::vector<T> host(static_cast<size_t>(tensor_.numel()));
    backend_->synchronize();
    backend_->copy_to_host(host.data(), tensor_.data(), host.size() * sizeof(T));
    return host;
  }

 private:
  Backend* backend_;
  Tensor tensor_;
};

using Floats = DeviceBuffer<float>;
using Ints = DeviceBuffer<int32_t>;

// n uniform values in [lo, hi) from a fixed seed.
inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  CounterRng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = lo + (hi - lo) * static_cast<float>(rng.next_double());
  return v;
}

inline std::vector<int32_t> random_ints(size_t n, uint64_t seed, int32_t below) {
  CounterRng rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(below)));
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Checks every element; on failure names the op, the count of bad elements and the worst one.
inline void check_close(const std::vector<float>& got, const std::vector<double>& ref, double atol,
                        double rtol, const std::string& what) {
  REQUIRE_MESSAGE(got.size() == ref.size(),
                  what << ": size " << got.size() << " vs " << ref.size());
  size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    const double tol = atol + rtol * std::abs(ref[i]);
    const double excess = std::isnan(err) ? 1e300 : err - tol;
    if (!(err <= tol)) ++bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " elements off; worst at "
                               << worst << ": got " << got[worst] << ", want " << ref[worst]
                               << " (atol " << atol << ", rtol " << rtol << ")");
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace pt::test
