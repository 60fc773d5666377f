#include "engine/devices/devices.h"

#include <sched.h>

#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "engine/core/backend_registry.h"
#include "engine/core/error.h"
#include "engine/devices/cuda_plugin.h"

namespace pt {

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

namespace {

// Which devices to open: "auto" takes every GPU the plugin finds, round robin (so 4 devices on
// one GPU are four slots of it), and otherwise CPU devices.
std::vector<DeviceId> resolve(std::string_view spec, int count, std::string& note) {
  std::vector<DeviceId> ids;
  if (spec != "auto") return parse_device_list(spec);
  const CudaStatus& cuda = cuda_status();
  const int wanted = std::max(1, count);
  if (!cuda.available) {
    note = cuda.message + "; using the CPU backend";
    for (int i = 0; i < wanted; ++i) ids.push_back({DeviceKind::cpu, i});
    return ids;
  }
  const int gpus = static_cast<int>(cuda.devices.size());
  for (int i = 0; i < wanted; ++i) ids.push_back({DeviceKind::cuda, i % gpus});
  if (wanted > gpus)
    note = fmt::format("{} devices on {} GPU{}: stages share a GPU, each with its own streams",
                       wanted, gpus, gpus == 1 ? "" : "s");
  return ids;
}

}  // namespace

DeviceSet open_devices(std::string_view spec, int count, int threads, CudaPrecision precision,
                       AttentionKernel attention) {
  DeviceSet out;
  const std::vector<DeviceId> ids = resolve(spec, count, out.note);
  const auto is_cuda = [](const DeviceId& d) { return d.kind == DeviceKind::cuda; };
  const size_t cuda_devices = static_cast<size_t>(std::count_if(ids.begin(), ids.end(), is_cuda));
  if (cuda_devices != 0 && cuda_devices != ids.size())
    throw UsageError(fmt::format(
        "--devices {} mixes CPU and CUDA devices: use only cpu:N or only cuda:N", spec));
  if (cuda_devices == 0 && precision != CudaPrecision::fp32)
    throw UsageError(
        fmt::format("--precision {} needs CUDA devices (the CPU backend computes in fp32): use "
                    "--precision fp32 or --devices cuda:N",
                    precision_name(precision)));
  if (cuda_devices == 0 && requires_cudnn(attention))
    throw UsageError(fmt::format(
        "--attention {} needs CUDA devices (cuDNN's fused flash attention); the CPU backend has "
        "one attention kernel: use --attention auto or native, or --devices cuda:N",
        attention_name(attention)));
  // A GPU may be listed more than once (stages sharing it); a CPU device may not, because its
  // threads are its cores.
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (ids[i] == ids[j] && !is_cuda(ids[i]))
        throw UsageError(
            fmt::format("device {} is listed twice in --devices {}", ids[i].str(), spec));

  const int cpu_devices = static_cast<int>(ids.size() - cuda_devices);
  const int per_device =
      threads > 0 ? threads : std::max(1, available_cores() / std::max(1, cpu_devices));
  // Each backend through the registry (engine/core/backend_registry.h): the engine names no
  // backend class. threads matter to the CPU backend, slots to devices listed more than once.
  std::map<std::pair<DeviceKind, int>, int> slots;  // device -> backends opened on it so far
  for (const DeviceId& id : ids) {
    BackendOptions options;
    options.index = id.index;
    options.slot = slots[{id.kind, id.index}]++;
    options.threads = per_device;
    options.precision = precision;
    options.attention = attention;
    out.backends.push_back(open_backend(kind_name(id.kind), options));
  }
  return out;
}

}  // namespace pt
