#pragma once
// Element types. f32 is what the CPU backend computes in; bf16/f16 are declared for the GPU's
// mixed-precision path; i32 carries labels and token ids.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pt {

enum class DType : uint8_t { f32, bf16, f16, i32 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
  }
  return 0;
}

// The names safetensors uses ("F32", "BF16", "F16", "I32").
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
  }
  return "?";
}

// The inverse of dtype_name: false when `name` is none of them.
constexpr bool dtype_from_name(std::string_view name, DType* out) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32})
    if (dtype_name(t) == name) {
      *out = t;
      return true;
    }
  return false;
}

}  // namespace pt
