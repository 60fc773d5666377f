#pragma once
// The exact plan of one point of the planner's search, as a run with those flags plans it
// (plan.h: partition by time, the timed simulator; planner.h): the ranked candidate, or how much
// memory it would need over the cap.
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/partition/layer_costs.h"
#include "engine/plan/planner.h"
#include "engine/plan/point_costs.h"
#include "engine/plan/search_point.h"
#include "schedule/schedule.h"

namespace pt::planner_detail {

struct ExactPlan {
  std::optional<PlanCandidate> candidate;  // none: over the cap
  int64_t over_cap_bytes = 0;              // > 0: what its busiest device needs
};

// Point p on its lowered schedule, with its layer costs (PointCosts::layer_costs(p)). Throws
// what planning throws (UsageError from the partitioner, ...): the point could not be planned.
ExactPlan plan_exactly(PointCosts& point_costs, const SearchPoint& p,
                       const sched::Schedule& lowered, const std::vector<LayerProfile>& costs);

}  // namespace pt::planner_detail
