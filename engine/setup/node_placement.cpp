#include "engine/setup/node_placement.h"

#include <unistd.h>

#include <array>
#include <cstring>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

NodePlacement place_on_node(const std::vector<std::string>& hosts, int rank) {
  if (rank < 0 || rank >= static_cast<int>(hosts.size()))
    throw std::invalid_argument(
        fmt::format("place_on_node: rank {} is not among the {} hosts", rank, hosts.size()));
  NodePlacement p{0, 0};
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    if (hosts[r] != hosts[rank]) continue;
    if (r < rank) ++p.local_rank;
    ++p.local_size;
  }
  return p;
}

NodePlacement node_placement(Communicator& world) {
  // A fixed width per rank: all_gather moves equal-sized pieces. Host names are at most 64
  // bytes on Linux (HOST_NAME_MAX); longer ones would be cut, and equal prefixes still agree.
  constexpr size_t kWidth = 256;
  std::array<char, kWidth> mine{};
  if (gethostname(mine.data(), kWidth - 1) != 0) std::strncpy(mine.data(), "?", kWidth - 1);
  std::vector<char> all(kWidth * static_cast<size_t>(world.size()));
  world.all_gather(mine.data(), all.data(), kWidth, "the host names (local ranks)");
  std::vector<std::string> hosts;
  for (int r = 0; r < world.size(); ++r)
    hosts.emplace_back(all.data() + static_cast<size_t>(r) * kWidth);
  return place_on_node(hosts, world.rank());
}

int gpu_for_local_rank(int local_rank, int visible_gpus) {
  if (visible_gpus <= 0 || local_rank < 0)
    throw std::invalid_argument(fmt::format(
        "gpu_for_local_rank: local rank {} with {} visible GPUs", local_rank, visible_gpus));
  return local_rank % visible_gpus;
}

}  // namespace pt
