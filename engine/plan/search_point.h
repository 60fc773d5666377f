#pragma once
// One point of the planner's search (planner.cpp): what point_costs.h prices, point_estimate.h
// estimates and point_exact_plan.h plans.
#include <cstdint>
#include <string>

#include "engine/pipeline/recompute.h"
#include "engine/plan/cluster.h"
#include "engine/plan/full_shard.h"

namespace pt::planner_detail {

// T x S x R devices, M micro-batches of `mb` samples, a schedule, a policy, a placement and
// whether the stages are sharded over the replicas.
struct SearchPoint {
  int T = 1, S = 1, R = 1, M = 1;
  int64_t mb = 1;
  std::string name;  // the schedule: a sched::generate() name
  RecomputePolicy policy;
  Placement placement = Placement::stages;
  ShardChoice shard = ShardChoice::none;
  bool split_backward = false;  // the schedule runs I and W apart (full sharding gathers for W)
  double estimate_s = 0;        // simulate_top > 0: the estimated step
};

}  // namespace pt::planner_detail
