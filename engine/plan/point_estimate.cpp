#include "engine/plan/point_estimate.h"

#include <algorithm>

#include "engine/core/error.h"
#include "engine/plan/plan.h"
#include "engine/plan/recompute_cost.h"
#include "schedule/generators.h"

namespace pt::planner_detail {

const UnitRun& PointEstimator::unit_run(const SearchPoint& p) {
  const int m = std::min(p.M, 6 * p.S);
  auto it = unit_runs_.find({p.name, p.S, m});
  if (it == unit_runs_.end()) {
    UnitRun u;
    u.compute = sched::generate(p.name, p.S, m);  // throws for a refused (S, M)
    u.sim = sched::simulate(u.compute);
    it = unit_runs_.emplace(std::tuple{p.name, p.S, m}, std::move(u)).first;
  }
  return it->second;
}

Estimate PointEstimator::estimate(const SearchPoint& p, const UnitRun& u) {
  const PlannerRequest& r = costs_.request();
  const std::vector<LayerProfile>& costs = costs_.layer_costs(p);
  const int stages = u.compute.num_stages;
  auto split = splits_.find({&costs, stages});
  if (split == splits_.end()) {
    PartitionRequest pq;
    pq.method = {PartitionMethod::Kind::time, {}};
    pq.stages = stages;
    split = splits_.emplace(std::pair{&costs, stages}, partition(costs, pq)).first;
  }
  const Partition* chosen = &split->second;
  const int m = u.compute.microbatches;
  std::vector<int> inflight = u.sim.peak_inflight;
  for (int& f : inflight)
    if (f == m) f = p.M;  // it holds every micro-batch (GPipe): all M
  auto [peak, grads] = costs_.memory(p, u.compute, *chosen, inflight, costs);
  // As the exact plan (point_exact_plan.cpp): without recomputation, sharding and one chunk per
  // device, a split under the cap.
  Partition under_cap;
  if (costs_.over_cap(peak) && p.policy.kind == RecomputePolicy::Kind::never &&
      p.shard == ShardChoice::none && stages == p.S) {
    PartitionRequest pq;
    pq.method = {PartitionMethod::Kind::memory, {}};
    pq.stages = stages;
    pq.mem_cap_bytes = r.mem_cap_bytes;
    pq.inflight_per_stage = inflight;
    pq.optimizer_slots = r.optimizer_slots;
    try {
      under_cap = partition(costs, pq);
      chosen = &under_cap;
      std::tie(peak, grads) = costs_.memory(p, u.compute, *chosen, inflight, costs);
    } catch (const UsageError&) {  // nothing fits: keep the time split's figure
    }
  }
  const Partition& part = *chosen;
  if (costs_.over_cap(peak)) return {0, *std::max_element(peak.begin(), peak.end())};
  // Per device: real seconds per micro-batch, and unit time per micro-batch (F + I + W = 3 per
  // stage it holds).
  std::vector<double> real(static_cast<size_t>(p.S), 0), units(real);
  for (int k = 0; k < stages; ++k) {
    const StagePlan& st = part.stages[static_cast<size_t>(k)];
    const auto d = static_cast<size_t>(u.compute.device_of(k));
    real[d] += st.time_s +
               recompute_time_s(costs, st.first_layer, st.last_layer, p.policy, k == stages - 1);
    units[d] += 3;
  }
  const size_t slow =
      static_cast<size_t>(std::max_element(real.begin(), real.end()) - real.begin());
  const double idle_units = u.sim.step_time - u.sim.busy[slow];
  // The fill and drain pass through every stage: their idle time in the mean device's seconds
  // per unit (the slowest device's would count its excess S times over).
  double real_sum = 0, unit_sum = 0;
  for (size_t d = 0; d < real.size(); ++d) real_sum += real[d], unit_sum += units[d];
  const double per_unit = real_sum / unit_sum;
  double transfers = 0;
  PlanRequest links;
  links.transfer_bytes_per_second = r.transfer_bytes_per_second;
  links.transfer_latency_s = r.transfer_latency_s;
  links.device_links = costs_.boundary_links(p.T, p.S, p.R, p.placement);
  for (int k = 0; k + 1 < stages; ++k)
    if (u.compute.device_of(k) != u.compute.device_of(k + 1))
      transfers += boundary_transfer_s(
          links, u.compute, k,
          static_cast<double>(
              costs[static_cast<size_t>(part.stages[static_cast<size_t>(k)].last_layer - 1)]
                  .output_bytes));
  return {p.M * real[slow] + idle_units * per_unit + 2 * transfers +
              costs_.gradient_sync_s(p, u.compute, part, costs, grads) + costs_.epilogue_s(grads),
          0};
}

}  // namespace pt::planner_detail
