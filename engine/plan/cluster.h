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
// not a send's; default: the intra-node link's; also the tensor-parallel all-reduces'); and,
// together, peak_tflops (the device's dense 16-bit peak, 1e12 FLOP/s) and achieved_fraction (the
// share of it a model's large GEMMs reach, all inefficiency inside a layer included): the
// achieved FLOP/s a GPT's costs are estimated at when pipetrain-plan is given no --flops.
//
// Placement (the planner tries both where they differ): devices d and e share a node when
// d / devices_per_node == e / devices_per_node, and replica r's pipeline device s is
//   stages    device r S + s: a replica's stages are neighbours; a stage boundary crosses nodes
//             only where a node ends (the frequent, latency-bound traffic stays on the fast
//             link), the all-reduce over devices s, S + s, ... crosses as soon as R S spans nodes;
//   replicas  device s R + r: a stage's replicas are neighbours (Megatron's order without
//             tensor parallelism); the all-reduce stays in a node when R divides
//             devices_per_node, the boundaries cross more often.
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
  Link intra_node_allreduce;         // the ring's per-step figures within a node
  double peak_flops_per_second = 0;  // peak_tflops x 1e12; 0: not given
  double achieved_fraction = 0;      // of the peak; 0: not given
  double achieved_flops_per_second() const { return peak_flops_per_second * achieved_fraction; }
};

// Throws FileError "NAME:LINE: ..." for an unknown or repeated key, a missing value or a number
// out of its range, and naming the key for one that is missing (or for one of peak_tflops and
// achieved_fraction without the other); devices must be a multiple of devices_per_node.
Cluster parse_cluster_text(std::string_view text, const std::string& name);
Cluster read_cluster_file(const std::string& path);

enum class Placement { stages, replicas };  // which neighbours share a node, as above
const char* placement_name(Placement p);    // "stages" | "replicas"

// For S x R devices placed as above, with nodes of `devices_per_node` (0: one node): for each
// pair of neighbouring pipeline devices s, s + 1 (S - 1 of them), whether it crosses a node in
// some replica (the step waits for the slowest replica).
std::vector<bool> boundaries_crossing_nodes(int S, int R, int devices_per_node,
                                            Placement placement = Placement::stages);
// Whether some all-reduce group (the R replicas of one pipeline device) spans nodes.
bool allreduce_crosses_nodes(int S, int R, int devices_per_node,
                             Placement placement = Placement::stages);

}  // namespace pt
