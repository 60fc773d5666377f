#pragma once
// A cluster we may not have, for pipetrain-plan: how many devices, their memory, how many share a
// node, and the two links (within a node, between nodes). Read from a cluster file:
//
//   # 512 nodes of 8 GPUs
//   devices                4096
//   memory_gib             80       # per device
//   devices_per_node       8
//   intra_node_gb_per_s    450      # one direction, per device (NVLink-class)
//   intra_node_latency_us  3
//   inter_node_gb_per_s    50       # per device (one 400 Gb/s NIC each)
//   inter_node_latency_us  10
//
// Every key once, in any order; GB are 1e9 bytes, GiB 2^30. Optional: allreduce_gb_per_s and
// allreduce_latency_us, the all-reduce's figures within a node (a collective's bus bandwidth is
// not a send's; default: the intra-node link's).
//
// Placement (what the planner assumes): replica r's pipeline device s is device r S + s, so a
// replica's stages are neighbours; devices d and e share a node when d / devices_per_node ==
// e / devices_per_node. A stage boundary crosses nodes only where a node ends (the frequent,
// latency-bound traffic stays on the fast link); the all-reduce of R replicas over devices
// s, S + s, ... crosses them as soon as the job spans nodes.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pt {

struct Link {
  double bytes_per_second = 30e9;
  double latency_s = 0;
  double seconds(double bytes) const { return bytes / bytes_per_second + latency_s; }
};

struct Cluster {
  int devices = 1;
  int64_t memory_bytes = 0;  // per device
  int devices_per_node = 1;
  Link intra_node, inter_node;
  Link intra_node_allreduce;  // the ring's per-step figures within a node
};

// Throws FileError "NAME:LINE: ..." for an unknown or repeated key, a missing value or a number
// out of its range, and naming the key for one that is missing; devices must be a multiple of
// devices_per_node.
Cluster parse_cluster_text(std::string_view text, const std::string& name);
Cluster read_cluster_file(const std::string& path);

// For S x R devices placed as above, with nodes of `devices_per_node` (0: one node): for each
// pair of neighbouring pipeline devices s, s + 1 (S - 1 of them), whether it crosses a node in
// some replica (the step waits for the slowest replica).
std::vector<bool> boundaries_crossing_nodes(int S, int R, int devices_per_node);
// Whether some all-reduce group (devices s, S + s, ..., (R - 1) S + s) spans nodes.
bool allreduce_crosses_nodes(int S, int R, int devices_per_node);

}  // namespace pt
