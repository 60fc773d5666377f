#include "engine/plan/point_exact_plan.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "engine/core/error.h"
#include "engine/plan/plan.h"

namespace pt::planner_detail {

ExactPlan plan_exactly(PointCosts& point_costs, const SearchPoint& p,
                       const sched::Schedule& lowered, const std::vector<LayerProfile>& costs) {
  const PlannerRequest& r = point_costs.request();
  PlanRequest pr;
  pr.devices = p.S;
  pr.microbatches = p.M;
  pr.batch = r.batch / p.R;
  pr.optimizer_slots = r.optimizer_slots;
  pr.transfer_bytes_per_second = r.transfer_bytes_per_second;
  pr.transfer_latency_s = r.transfer_latency_s;
  pr.device_links = point_costs.boundary_links(p.T, p.S, p.R, p.placement);
  pr.data_parallel = p.R > 1;
  pr.recompute = p.policy;
  pr.partition = {PartitionMethod::Kind::time, {}};
  const auto memory = [&](const PipelinePlan& plan) {
    return point_costs.memory(p, plan.schedule, plan.partition, plan.simulated.peak_inflight,
                              costs);
  };
  PipelinePlan plan = plan_with_costs(lowered, costs, pr, p.name, "");
  auto [peak, grads] = memory(plan);
  // Without recomputation, sharding and one chunk per device, the partitioner's own memory
  // model is this one: let it search for a split under the cap.
  if (point_costs.over_cap(peak) && p.policy.kind == RecomputePolicy::Kind::never &&
      p.shard == ShardChoice::none && lowered.num_stages == p.S) {
    const int64_t unbalanced = *std::max_element(peak.begin(), peak.end());
    pr.partition = {PartitionMethod::Kind::memory, {}};
    pr.mem_cap_bytes = r.mem_cap_bytes;
    try {
      plan = plan_with_costs(lowered, costs, pr, p.name, "");
      std::tie(peak, grads) = memory(plan);
    } catch (const UsageError&) {
      peak.assign(1, unbalanced);  // nothing fits: keep the time split's figure
    }
  }
  if (point_costs.over_cap(peak))
    return {std::nullopt, *std::max_element(peak.begin(), peak.end())};
  PlanCandidate c;
  c.tensor_parallel = p.T;
  c.shard = p.shard;
  c.stages = p.S;
  c.replicas = p.R;
  c.microbatches = p.M;
  c.schedule = p.name;
  c.recompute = p.policy;
  c.layout = plan.partition.layout();
  c.partition = pr.partition;
  c.pipeline_s = plan.simulated.step_time;
  c.allreduce_s = point_costs.gradient_sync_s(p, plan.schedule, plan.partition, costs, grads);
  c.gather_s = point_costs.gather_s(p, plan.schedule, plan.partition);
  c.placement = p.placement;
  c.epilogue_s = point_costs.epilogue_s(grads);
  c.step_s = c.pipeline_s + c.allreduce_s + c.epilogue_s;
  c.estimate_s = p.estimate_s;
  double busy = 0;
  for (double b : plan.simulated.busy) busy += b;
  c.bubble =
      1 - busy / static_cast<double>(plan.simulated.busy.size()) / (c.pipeline_s + c.allreduce_s);
  c.peak_bytes = std::move(peak);
  return {std::move(c), 0};
}

}  // namespace pt::planner_detail
