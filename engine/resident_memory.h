#pragma once
// The process's resident memory, for the per-step metrics and the soak test (scripts/soak.sh):
// a training loop whose resident size keeps growing after warm-up leaks.
#include <cstddef>

namespace pt {

// Bytes of this process resident in RAM now (Linux: /proc/self/statm); 0 where unknown.
size_t resident_bytes();

}  // namespace pt
