#pragma once
// What the op-by-op GPU tests share (tests/gpu/ops_test.cpp, cudnn_attention_test.cpp): the
// reference (the CPU backend) and the device under test side by side, inputs from
// pt::CounterRng, and element-wise comparison |cuda - cpu| <= atol + rtol |cpu| that names the
// worst element. ops_test.cpp's header comment has the tolerance table and its reasons.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/core/backend.h"
#include "engine/core/random.h"
#include "engine/devices/cuda_plugin.h"
#include "kernels/cpu/cpu_backend.h"

namespace pt::test::gpu_ops {

struct Tol {
  double atol, rtol;
};
constexpr Tol kExact{0, 0};
constexpr Tol kElementwise{1e-7, 1e-6};
inline Tol column_sums(int64_t rows) { return {2e-6 * std::sqrt(static_cast<double>(rows)), 1e-5}; }
inline Tol conv_tol(int64_t terms) { return {2e-5 * std::sqrt(static_cast<double>(terms)), 1e-4}; }
constexpr Tol kAttention{5e-5, 5e-4};
inline Tol gemm_tol(CudaPrecision p, int64_t K) {
  const double sk = std::sqrt(static_cast<double>(K));
  switch (p) {
    case CudaPrecision::tf32: return {2.5e-3 * sk, 5e-3};
    case CudaPrecision::bf16: return {4e-3 * sk, 2e-2};
    default: return {1e-5 * sk, 1e-5};
  }
}

inline const float kNaN = std::numeric_limits<float>::quiet_NaN();

inline std::vector<float> randf(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  CounterRng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = lo + (hi - lo) * static_cast<float>(rng.next_double());
  return v;
}

inline std::vector<int32_t> randi(size_t n, uint64_t seed, int32_t below) {
  CounterRng rng(seed);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(below)));
  return v;
}

inline std::string num(double v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

// One CHECK per array; on failure it names the op, the count of bad elements and the worst one
// (index, both values). Returns the largest |got - ref| (for calibration messages).
inline double expect_close(const std::string& name, const std::vector<float>& got,
                           const std::vector<float>& ref, double atol, double rtol) {
  REQUIRE_MESSAGE(got.size() == ref.size(), name << ": " << got.size() << " vs " << ref.size());
  size_t bad = 0, worst = 0;
  double worst_excess = -std::numeric_limits<double>::infinity(), max_err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - static_cast<double>(ref[i]));
    const double excess = std::isnan(err)
                              ? std::numeric_limits<double>::infinity()
                              : err - (atol + rtol * std::abs(static_cast<double>(ref[i])));
    if (!(excess <= 0)) ++bad;
    if (!std::isnan(err) && err > max_err) max_err = err;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  INFO(name << ": " << bad << " of " << got.size() << " elements outside |cuda - cpu| <= " << atol
            << " + " << rtol << " |cpu|; worst at [" << worst << "]: cuda "
            << num(got.empty() ? 0.0 : got[worst]) << ", cpu "
            << num(ref.empty() ? 0.0 : ref[worst]) << ", |diff| "
            << num(got.empty() ? 0.0 : std::abs(static_cast<double>(got[worst]) - ref[worst])));
  CHECK(bad == 0);
  return max_err;
}

template <class T>
inline void expect_equal(const std::string& name, const std::vector<T>& got,
                         const std::vector<T>& ref) {
  REQUIRE_MESSAGE(got.size() == ref.size(), name << ": " << got.size() << " vs " << ref.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &ref[i], sizeof(T)) != 0 && bad++ == 0) first = i;
  INFO(name << ": " << bad << " of " << got.size() << " elements differ; first at [" << first
            << "]: cuda " << num(got.empty() ? 0.0 : static_cast<double>(got[first])) << ", cpu "
            << num(ref.empty() ? 0.0 : static_cast<double>(ref[first])));
  CHECK(bad == 0);
}

// The same array on both backends: side 0 is the CPU (reference), side 1 the GPU.
struct Twin {
  Tensor t[2];
  float* f(int s) const { return t[s].f32(); }
  int32_t* i(int s) const { return t[s].i32(); }
};

// The reference and the device under test; one pair per test case, so every case starts from
// fresh backends and the backends go away before the CUDA runtime does.
struct Pair {
  explicit Pair(CudaPrecision p = CudaPrecision::fp32)
      : cpu(make_cpu_backend(0, 1)), gpu(make_cuda_backend(0, 0, p)) {}
  explicit Pair(const BackendOptions& gpu_options)
      : cpu(make_cpu_backend(0, 1)), gpu(make_cuda_backend(gpu_options)) {}
  std::unique_ptr<Backend> cpu, gpu;

  Backend& side(int s) { return s == 0 ? *cpu : *gpu; }

  template <class T>
  Twin upload(const std::vector<T>& host) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, int32_t>);
    Twin w;
    for (int s = 0; s < 2; ++s) {
      w.t[s] = side(s).empty(Shape{static_cast<int64_t>(host.size())},
                             std::is_same_v<T, float> ? DType::f32 : DType::i32);
      set(w, s, host);
    }
    return w;
  }
  template <class T>
  void set(const Twin& w, int s, const std::vector<T>& host) {
    if (!host.empty()) side(s).copy_from_host(w.t[s].data(), host.data(), host.size() * sizeof(T));
  }
  template <class T = float>
  std::vector<T> get(const Twin& w, int s) {
    std::vector<T> host(w.t[s].bytes() / sizeof(T));
    side(s).synchronize();
    if (!host.empty()) side(s).copy_to_host(host.data(), w.t[s].data(), w.t[s].bytes());
    return host;
  }
  // Gives the GPU side the CPU side's bytes (the inputs of a backward op).
  void mirror(const Twin& w) {
    std::vector<char> bytes = get<char>(w, 0);
    set(w, 1, bytes);
  }
  // Runs op(backend, side) on the CPU, then on the GPU, and waits for the GPU.
  template <class Op>
  void run(Op op) {
    op(*cpu, 0);
    op(*gpu, 1);
    gpu->synchronize();
  }
  double compare(const std::string& name, const Twin& w, Tol tol) {
    return expect_close(name, get(w, 1), get(w, 0), tol.atol, tol.rtol);
  }
  void compare_ints(const std::string& name, const Twin& w) {
    expect_equal(name, get<int32_t>(w, 1), get<int32_t>(w, 0));
  }
};

inline std::vector<float> nans(size_t n) { return std::vector<float>(n, kNaN); }

}  // namespace pt::test::gpu_ops
