#include "engine/report/resident_memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

namespace pt {

size_t resident_bytes() {
  // statm: total and resident size in pages. One read of a small procfs file: ~2 us per step.
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long total = 0, resident = 0;
  const bool ok = std::fscanf(f, "%lu %lu", &total, &resident) == 2;
  std::fclose(f);
  const long page = ::sysconf(_SC_PAGESIZE);
  return ok && page > 0 ? static_cast<size_t>(resident) * static_cast<size_t>(page) : 0;
}

size_t peak_resident_bytes() {
  // VmHWM: the high-water mark that clear_refs resets (ru_maxrss below may keep an older one).
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    unsigned long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f))
      found = std::sscanf(line, "VmHWM: %lu kB", &kib) == 1;
    std::fclose(f);
    if (found) return static_cast<size_t>(kib) * 1024;
  }
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0 || u.ru_maxrss <= 0) return 0;
  return static_cast<size_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

bool reset_peak_resident() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace pt
