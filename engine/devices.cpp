#include "engine/devices.h"

#include <sched.h>

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/cuda_plugin.h"
#include "kernels/cpu/cpu_backend.h"

namespace pt {

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

DeviceSet open_devices(std::string_view spec, int count, int threads) {
  DeviceSet out;
  std::vector<DeviceId> ids;
  if (spec == "auto") {
    const CudaStatus& cuda = cuda_status();
    if (!cuda.available) out.note = cuda.message + "; using the CPU backend";
    // The CUDA backend itself arrives with the CUDA issue; until then auto means CPU.
    else out.note = "CUDA devices found but the CUDA backend is not built yet; using the CPU backend";
    for (int i = 0; i < std::max(1, count); ++i) ids.push_back({DeviceKind::cpu, i});
  } else {
    ids = parse_device_list(spec);
  }
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (ids[i] == ids[j])
        throw UsageError(fmt::format("device {} is listed twice in --devices {}", ids[i].str(), spec));

  const int cpu_devices = static_cast<int>(std::count_if(
      ids.begin(), ids.end(), [](const DeviceId& d) { return d.kind == DeviceKind::cpu; }));
  const int per_device = threads > 0 ? threads : std::max(1, available_cores() / std::max(1, cpu_devices));
  for (const DeviceId& id : ids) {
    if (id.kind == DeviceKind::cuda) {
      const CudaStatus& cuda = cuda_status();
      if (!cuda.available)
        throw UsageError(fmt::format("cannot open {}: {}. Use --devices cpu:0 (or auto)", id.str(), cuda.message));
      throw UsageError(fmt::format("cannot open {}: the CUDA backend is not implemented yet in this "
                                   "build; use --devices cpu:N", id.str()));
    }
    out.backends.push_back(make_cpu_backend(id.index, per_device));
  }
  return out;
}

}  // namespace pt
