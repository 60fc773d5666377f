#pragma once
// What one point of the planner's search costs besides its pipeline's timing (planner.h says
// how each is priced): its layer costs (tensor-parallel all-reduces, full sharding's gathers),
// its memory per device, the links of its stage boundaries, and what follows the pipeline (the
// gradient all-reduce or reduce-scatters, the epilogue). Both the estimate (point_estimate.h) and
// the exact plan (point_exact_plan.h) price a point with it.
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/partition/layer_costs.h"
#include "engine/partition/partitioner.h"
#include "engine/plan/cluster.h"
#include "engine/plan/planner.h"
#include "engine/plan/search_point.h"
#include "schedule/schedule.h"

namespace pt::planner_detail {

class PointCosts {
 public:
  // Both are referenced, not copied: they outlive the search.
  PointCosts(const ShardedCostsFor& costs_for, const PlannerRequest& request);

  const PlannerRequest& request() const { return r_; }

  // With T ranks per stage innermost, a node holds devices_per_node / T pipeline "devices" (0:
  // one node, as --plan auto).
  int units_per_node(int T) const;

  // One rank's costs at micro-batch size mb, its tensor-parallel all-reduces priced on the
  // node's all-reduce link. Cached: the reference lives as long as this object.
  const std::vector<LayerProfile>& layer_costs(int64_t mb, int T);
  // A point's costs: with full sharding each layer waits for its parameter all-gathers over the
  // data-parallel link (full_shard.h). Cached as above, by (mb, T, R, whether the group spans
  // nodes, whether the schedule splits the backward); mb and R set M = B / (R mb).
  const std::vector<LayerProfile>& layer_costs(const SearchPoint& p);

  // Per device of one replica: peak bytes and the gradient bytes the epilogue and the all-reduce
  // see, sharded or not.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> memory(
      const SearchPoint& p, const sched::Schedule& schedule, const Partition& partition,
      const std::vector<int>& inflight, const std::vector<LayerProfile>& costs) const;
  // Whether some device's peak is over the request's cap (none: never).
  bool over_cap(const std::vector<int64_t>& peak) const;

  // The links of the stage boundaries on a cluster (empty without one: PlanRequest's figures).
  std::vector<Link> boundary_links(int T, int S, int R, Placement placement) const;

  // After the pipeline: the gradient all-reduce, or (shard full) the slowest device's
  // reduce-scatters.
  double gradient_sync_s(const SearchPoint& p, const sched::Schedule& schedule,
                         const Partition& partition, const std::vector<LayerProfile>& costs,
                         const std::vector<int64_t>& grads) const;
  // Shard full: what the gathers add to the busiest device's step, M micro-batches of each of
  // its layers' F, I and W (a recomputed forward reuses the backward's gather:
  // recompute_cost.h); 0 without sharding.
  double gather_s(const SearchPoint& p, const sched::Schedule& schedule,
                  const Partition& partition);
  // The step's epilogue (step_overheads.h) for a replica with these gradient bytes per device.
  double epilogue_s(const std::vector<int64_t>& grad_bytes) const;

 private:
  // The link of the data-parallel group (the R replicas of one pipeline device).
  Link data_parallel_link(int T, int S, int R, Placement placement) const;

  const ShardedCostsFor& costs_for_;
  const PlannerRequest& r_;
  std::map<std::pair<int64_t, int>, std::vector<LayerProfile>> plain_;  // by (mb, T)
  std::map<std::tuple<int64_t, int, int, bool, bool>, std::vector<LayerProfile>> gathered_;
};

}  // namespace pt::planner_detail
