// node_placement: the local rank and local size from the processes' host names, and the GPU
// that `--devices auto` picks for a local rank, checked without a GPU.
#include "engine/setup/node_placement.h"

#include <doctest/doctest.h>

#include <future>
#include <stdexcept>

#include "engine/comm/in_process.h"

using namespace pt;

TEST_CASE("place_on_node: two nodes of 8, in world rank order") {
  std::vector<std::string> hosts;
  for (int r = 0; r < 16; ++r) hosts.push_back(r < 8 ? "node-a" : "node-b");
  for (int r = 0; r < 16; ++r) {
    const NodePlacement p = place_on_node(hosts, r);
    CHECK(p.local_rank == r % 8);
    CHECK(p.local_size == 8);
  }
}

TEST_CASE("place_on_node: ranks dealt round robin over nodes (srun --distribution=cyclic)") {
  const std::vector<std::string> hosts = {"a", "b", "a", "b", "a"};
  CHECK(place_on_node(hosts, 0).local_rank == 0);
  CHECK(place_on_node(hosts, 1).local_rank == 0);
  CHECK(place_on_node(hosts, 2).local_rank == 1);
  CHECK(place_on_node(hosts, 4).local_rank == 2);
  CHECK(place_on_node(hosts, 4).local_size == 3);
  CHECK(place_on_node(hosts, 3).local_size == 2);
  CHECK_THROWS_AS(place_on_node(hosts, 5), std::invalid_argument);
}

TEST_CASE("gpu_for_local_rank: the job's GPUs, renumbered from 0 by CUDA_VISIBLE_DEVICES") {
  // 8 GPUs visible to each of 8 processes on a node (Slurm: --gpus-per-node=8): one each.
  for (int r = 0; r < 8; ++r) CHECK(gpu_for_local_rank(r, 8) == r);
  // One GPU per task (--gpus-per-task=1, CUDA_VISIBLE_DEVICES names one): always its cuda:0.
  for (int r = 0; r < 8; ++r) CHECK(gpu_for_local_rank(r, 1) == 0);
  // More processes than GPUs: they share, spread evenly.
  CHECK(gpu_for_local_rank(5, 4) == 1);
  CHECK_THROWS_AS(gpu_for_local_rank(0, 0), std::invalid_argument);
  CHECK_THROWS_AS(gpu_for_local_rank(-1, 2), std::invalid_argument);
}

TEST_CASE("node_placement: gathered over a communicator, every rank on this host") {
  auto group = make_in_process_group(3, 10.0, "node placement test");
  std::vector<std::future<NodePlacement>> placed;
  for (auto& comm : group)
    placed.push_back(std::async(std::launch::async, [&comm] { return node_placement(*comm); }));
  for (int r = 0; r < 3; ++r) {
    const NodePlacement p = placed[r].get();
    CHECK(p.local_rank == r);
    CHECK(p.local_size == 3);
  }
}
