#pragma once
namespace pt {
// "0.1.0"
const char* version();
}  // namespace pt
