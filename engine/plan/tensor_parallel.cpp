#include "engine/plan/tensor_parallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"

namespace pt {

double ring_allreduce_s(double bytes, int T, const Link& link) {
  if (T < 2) return 0;
  return 2.0 * (T - 1) / T * bytes / link.bytes_per_second + 2.0 * (T - 1) * link.latency_s;
}

std::vector<LayerProfile> with_tensor_parallel_traffic(const ShardedCosts& costs, int T,
                                                       const Link& link) {
  std::vector<LayerProfile> out = costs.layers;
  for (size_t l = 0; l < out.size(); ++l) {
    const double one = ring_allreduce_s(static_cast<double>(costs.allreduce_bytes[l]), T, link);
    out[l].forward_s += costs.forward_allreduces[l] * one;
    out[l].backward_input_s += costs.backward_allreduces[l] * one;
  }
  return out;
}

std::vector<int> tensor_parallel_degrees(int devices, int devices_per_node, int heads, int most) {
  std::vector<int> out{1};
  if (heads <= 0) return out;
  for (int T = 2; T <= most && T <= devices; ++T)
    if (devices % T == 0 && heads % T == 0 && (devices_per_node <= 0 || devices_per_node % T == 0))
      out.push_back(T);
  return out;
}

void check_tensor_parallel(int T, int devices, int devices_per_node, int heads) {
  const auto refuse = [&](const std::string& why) {
    const std::vector<int> valid =
        tensor_parallel_degrees(devices, devices_per_node, heads, devices);
    throw UsageError(
        fmt::format("--tensor-parallel {}: {}; valid here: {}", T, why, fmt::join(valid, ", ")));
  };
  if (T < 1) refuse("must be >= 1");
  if (T == 1) return;
  if (heads <= 0)
    refuse(
        "these layer costs say nothing of how the layers shard (a cost file or profile); a "
        "GPT's shape (--gpt-layers ... --heads) does");
  if (heads % T != 0)
    refuse(fmt::format("does not divide the {} attention heads (each rank computes whole heads)",
                       heads));
  if (devices_per_node > 0 && devices_per_node % T != 0)
    refuse(fmt::format("does not divide the {} devices per node (a stage's T ranks share a node)",
                       devices_per_node));
  if (devices % T != 0) refuse(fmt::format("does not divide the {} devices", devices));
}

}  // namespace pt
