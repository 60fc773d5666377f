// Helpers every Communicator implementation shares: element sizes, the element-wise reduction
// step, and the pieces of their error messages.
#include "engine/comm/communicator.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"

namespace pt {

size_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::f32: return sizeof(float);
    case ElemType::f64: return sizeof(double);
    case ElemType::i64: return sizeof(int64_t);
  }
  throw UsageError(fmt::format("unknown ElemType {}", static_cast<int>(t)));
}

namespace {

template <typename T>
void accumulate_as(void* acc, const void* in, int64_t n) {
  T* a = static_cast<T*>(acc);
  const T* b = static_cast<const T*>(in);
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

template <typename T>
void divide_as(void* data, int64_t n, T divisor) {
  T* d = static_cast<T*>(data);
  for (int64_t i = 0; i < n; ++i) d[i] /= divisor;  // a division, not a multiplication by 1/R:
}  // x / 3 and x * (1/3) differ in the last bit

}  // namespace

void accumulate(void* acc, const void* in, int64_t n, ElemType type) {
  switch (type) {
    case ElemType::f32: return accumulate_as<float>(acc, in, n);
    case ElemType::f64: return accumulate_as<double>(acc, in, n);
    case ElemType::i64: return accumulate_as<int64_t>(acc, in, n);
  }
}

void divide_by_ranks(void* data, int64_t n, ElemType type, int ranks) {
  if (ranks == 1) return;
  switch (type) {
    case ElemType::f32: return divide_as<float>(data, n, static_cast<float>(ranks));
    case ElemType::f64: return divide_as<double>(data, n, static_cast<double>(ranks));
    case ElemType::i64: return divide_as<int64_t>(data, n, ranks);  // truncates toward zero
  }
}

std::string format_ranks(std::span<const int> ranks) {
  constexpr size_t kListed = 16;
  std::string out =
      fmt::format("{}", fmt::join(ranks.first(std::min(ranks.size(), kListed)), ", "));
  if (ranks.size() > kListed) out = fmt::format("{}, ... ({} ranks)", out, ranks.size());
  return out;
}

std::chrono::steady_clock::time_point deadline_after(double timeout_s) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(timeout_s));
}

}  // namespace pt
