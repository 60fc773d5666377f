#include "engine/plan/point_costs.h"

#include <algorithm>

#include "engine/partition/byte_count.h"
#include "engine/plan/full_shard.h"
#include "engine/plan/recompute_cost.h"
#include "engine/plan/tensor_parallel.h"

namespace pt::planner_detail {

namespace {

// Ring all-reduce of each device's gradients over R >= 2 replicas: the slowest device's, over
// the slowest link the ring crosses. With T > 1 each rank reduces its own share (grad_bytes are a
// rank's), all T rings at once, each GPU over its own link.
double allreduce_s(int replicas, const std::vector<int64_t>& grad_bytes, const Link& link) {
  const int64_t most = *std::max_element(grad_bytes.begin(), grad_bytes.end());
  const double ring = 2.0 * (replicas - 1) / replicas;
  return ring * static_cast<double>(most) / link.bytes_per_second +
         2.0 * (replicas - 1) * link.latency_s;
}

// Per device of one replica: peak bytes (parameters, gradients, optimizer state, the activations
// of `inflight` micro-batches per stage, recomputation as recompute_cost.h) and gradient bytes.
std::pair<std::vector<int64_t>, std::vector<int64_t>> device_memory(
    const sched::Schedule& schedule, const Partition& partition, const std::vector<int>& inflight,
    const std::vector<LayerProfile>& costs, int optimizer_slots, const RecomputePolicy& policy) {
  std::vector<int64_t> peak(static_cast<size_t>(schedule.num_devices), 0), grads(peak);
  const int stages = static_cast<int>(partition.stages.size());
  for (int k = 0; k < stages; ++k) {
    const StagePlan& st = partition.stages[static_cast<size_t>(k)];
    const auto d = static_cast<size_t>(schedule.device_of(k));
    // Saturating (byte_count.h): a cost file's maxima overflow int64_t.
    peak[d] = add_bytes(peak[d], stage_memory_bytes(costs, st.first_layer, st.last_layer,
                                                    inflight[static_cast<size_t>(k)],
                                                    optimizer_slots, policy, k == stages - 1));
    grads[d] = add_bytes(grads[d], times_bytes(st.params, static_cast<int64_t>(sizeof(float))));
  }
  return {peak, grads};
}

}  // namespace

PointCosts::PointCosts(const ShardedCostsFor& costs_for, const PlannerRequest& request)
    : costs_for_(costs_for), r_(request) {}

int PointCosts::units_per_node(int T) const {
  return r_.devices_per_node > 0 ? r_.devices_per_node / T : 0;
}

// The inter-node link where some group spans nodes, the all-reduce's figures within a node
// otherwise.
Link PointCosts::data_parallel_link(int T, int S, int R, Placement placement) const {
  if (allreduce_crosses_nodes(S, R, units_per_node(T), placement)) return r_.inter_node;
  return {r_.allreduce_bytes_per_second, r_.allreduce_latency_s};
}

const std::vector<LayerProfile>& PointCosts::layer_costs(int64_t mb, int T) {
  auto cached = plain_.find({mb, T});
  if (cached == plain_.end()) {
    const Link within_node{r_.allreduce_bytes_per_second, r_.allreduce_latency_s};
    cached = plain_
                 .emplace(std::pair{mb, T},
                          with_tensor_parallel_traffic(costs_for_(mb, T), T, within_node))
                 .first;
  }
  return cached->second;
}

const std::vector<LayerProfile>& PointCosts::layer_costs(const SearchPoint& p) {
  if (p.shard == ShardChoice::none) return layer_costs(p.mb, p.T);
  const bool across = allreduce_crosses_nodes(p.S, p.R, units_per_node(p.T), p.placement);
  const std::tuple key{p.mb, p.T, p.R, across, p.split_backward};
  auto cached = gathered_.find(key);
  if (cached == gathered_.end())
    cached =
        gathered_
            .emplace(key, with_full_shard_gathers(layer_costs(p.mb, p.T), p.R, p.M,
                                                  data_parallel_link(p.T, p.S, p.R, p.placement),
                                                  r_.shard_prefetch, p.split_backward))
            .first;
  return cached->second;
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> PointCosts::memory(
    const SearchPoint& p, const sched::Schedule& schedule, const Partition& partition,
    const std::vector<int>& inflight, const std::vector<LayerProfile>& costs) const {
  if (p.shard == ShardChoice::full)
    return full_shard_device_memory(schedule, partition, inflight, costs, r_.optimizer_slots,
                                    p.policy, p.R, p.M, r_.shard_prefetch);
  return device_memory(schedule, partition, inflight, costs, r_.optimizer_slots, p.policy);
}

bool PointCosts::over_cap(const std::vector<int64_t>& peak) const {
  return r_.mem_cap_bytes > 0 && *std::max_element(peak.begin(), peak.end()) > r_.mem_cap_bytes;
}

std::vector<Link> PointCosts::boundary_links(int T, int S, int R, Placement placement) const {
  std::vector<Link> links;
  if (r_.devices_per_node <= 0) return links;
  for (const bool across : boundaries_crossing_nodes(S, R, units_per_node(T), placement))
    links.push_back(across ? r_.inter_node
                           : Link{r_.transfer_bytes_per_second, r_.transfer_latency_s});
  return links;
}

double PointCosts::gradient_sync_s(const SearchPoint& p, const sched::Schedule& schedule,
                                   const Partition& partition,
                                   const std::vector<LayerProfile>& costs,
                                   const std::vector<int64_t>& grads) const {
  if (p.shard == ShardChoice::none)
    return p.R < 2 ? 0 : allreduce_s(p.R, grads, data_parallel_link(p.T, p.S, p.R, p.placement));
  return full_shard_step_reduce_s(schedule, partition, costs, p.R,
                                  data_parallel_link(p.T, p.S, p.R, p.placement),
                                  r_.shard_prefetch);
}

double PointCosts::gather_s(const SearchPoint& p, const sched::Schedule& schedule,
                            const Partition& partition) {
  if (p.shard == ShardChoice::none) return 0.0;
  return full_shard_gather_added_s(schedule, partition, layer_costs(p.mb, p.T), layer_costs(p),
                                   p.M);
}

double PointCosts::epilogue_s(const std::vector<int64_t>& grad_bytes) const {
  int64_t total = 0;
  for (int64_t b : grad_bytes) total = add_bytes(total, b);
  const int64_t most = *std::max_element(grad_bytes.begin(), grad_bytes.end());
  constexpr auto f32 = static_cast<int64_t>(sizeof(float));
  return r_.overheads.seconds(total / f32, most / f32);
}

}  // namespace pt::planner_detail
