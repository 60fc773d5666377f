#pragma once
// The process's resident memory, for the per-step metrics, the end-of-run summary, the memory
// benchmark (bench/memory.cpp) and the soak test (scripts/soak.sh): a training loop whose
// resident size keeps growing after warm-up leaks.
#include <cstddef>

namespace pt {

// Bytes of this process resident in RAM now (Linux: /proc/self/statm); 0 where unknown.
size_t resident_bytes();

// The most bytes this process has had resident at once (Linux: VmHWM of /proc/self/status, the
// kernel's high-water mark, so no peak between two samples is missed); 0 where unknown.
size_t peak_resident_bytes();

// Restarts peak_resident_bytes() from the resident size now, so that the peak of one part of a
// run can be measured (Linux >= 4.0: "5" into /proc/self/clear_refs). False where not possible.
bool reset_peak_resident();

}  // namespace pt
