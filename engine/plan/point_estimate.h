#pragma once
// The planner's estimate of one point without its full schedule (simulate_top > 0; planner.h
// says how): the schedule simulated with unit times at M' = min(M, 6 S) micro-batches, its idle
// time added to the slowest device's real busy time, the boundaries' transfers, then what
// follows the pipeline (point_costs.h).
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/partition/layer_costs.h"
#include "engine/partition/partitioner.h"
#include "engine/plan/point_costs.h"
#include "engine/plan/search_point.h"
#include "schedule/schedule.h"
#include "schedule/simulate.h"

namespace pt::planner_detail {

// A schedule simulated with unit times at M' micro-batches.
struct UnitRun {
  sched::Schedule compute;  // at M'
  sched::SimResult sim;
};

struct Estimate {
  double step_s = 0;           // the estimated step (pipeline, gradient sync and epilogue)
  int64_t over_cap_bytes = 0;  // > 0: over the cap, what its busiest device needs (no step_s)
};

class PointEstimator {
 public:
  // `costs` is referenced: it outlives the estimator.
  explicit PointEstimator(PointCosts& costs) : costs_(costs) {}

  // The unit run of (p.name, p.S, M'), cached; throws what sched::generate throws for a refused
  // (S, M').
  const UnitRun& unit_run(const SearchPoint& p);
  // Point p (p.name at p.S stages) from its unit run.
  Estimate estimate(const SearchPoint& p, const UnitRun& u);

 private:
  PointCosts& costs_;
  std::map<std::tuple<std::string, int, int>, UnitRun> unit_runs_;  // (name, S, M')
  // By time, per cost table (PointCosts', which live as long as it does) and stage count.
  std::map<std::pair<const std::vector<LayerProfile>*, int>, Partition> splits_;
};

}  // namespace pt::planner_detail
