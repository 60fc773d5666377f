// search_plans (planner.h): the walk over every point of the search, each estimated
// (point_estimate.h) or planned exactly (point_exact_plan.h), priced by point_costs.h; then the
// ranking, the rejected classes, and the error when nothing fits.
#include "engine/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "engine/plan/plan.h"
#include "engine/plan/point_costs.h"
#include "engine/plan/point_estimate.h"
#include "engine/plan/point_exact_plan.h"
#include "engine/plan/search_point.h"
#include "engine/plan/tensor_parallel.h"
#include "schedule/generators.h"

namespace pt {

namespace {

using planner_detail::Estimate;
using planner_detail::ExactPlan;
using planner_detail::PointCosts;
using planner_detail::PointEstimator;
using planner_detail::SearchPoint;
using planner_detail::UnitRun;

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::vector<int> divisors_up_to(int64_t n, int most) {
  std::vector<int> out;
  for (int m = 1; m <= most && m <= n; ++m)
    if (n % m == 0) out.push_back(m);
  return out;
}

// Rejections grouped by (schedule, why): one line per class, the first full reason as example.
class Rejections {
 public:
  void add(const std::string& schedule, const std::string& why, const std::string& example) {
    auto [it, fresh] = index_.try_emplace({schedule, why}, list_.size());
    if (fresh) list_.push_back({schedule, why, 0, example});
    ++list_[it->second].count;
  }
  std::vector<PlanRejection> take() { return std::move(list_); }

 private:
  std::map<std::pair<std::string, std::string>, size_t> index_;
  std::vector<PlanRejection> list_;
};

// "S x R = 4 x 2", or "T x S x R = 8 x 4 x 2" with tensor parallelism.
std::string shape_text(int T, int S, int R) {
  return T > 1 ? fmt::format("T x S x R = {} x {} x {}", T, S, R)
               : fmt::format("S x R = {} x {}", S, R);
}

// "S x R = 4 x 2, shard full, M = 8": the point's shape for a rejection's example.
std::string point_text(const SearchPoint& p) {
  return fmt::format("{}{}, M = {}", shape_text(p.T, p.S, p.R),
                     p.shard == ShardChoice::full ? ", shard full" : "", p.M);
}

// Whether some device's list has a W: the schedule splits the backward (zero-bubble).
bool splits_backward(const sched::Schedule& schedule) {
  for (const auto& list : schedule.actions)
    for (const sched::Action& a : list)
      if (a.type == sched::ActionType::W) return true;
  return false;
}

// One search: T x S x R shapes, then per shape M, then per M the schedules, then per schedule
// every policy x placement x shard choice, each point estimated or planned exactly (counted in
// `out_.considered`, or rejected with its class); with estimates, the best planned exactly last.
class PlanSearch {
 public:
  // Throws UsageError for a request nothing can be searched for (planner.h).
  PlanSearch(const ShardedCostsFor& costs_for, const PlannerRequest& request);
  PlannerResult run();

 private:
  void search_shape(int T, int S, int R);
  // Every policy, placement and shard choice of p's schedule at its M (p.policy, p.placement and
  // p.shard are set here); L: the layers.
  void search_schedule(SearchPoint p, int L, const std::vector<Placement>& placements,
                       const std::vector<ShardChoice>& shards);
  void estimate_point(SearchPoint p, const UnitRun& u);
  void plan_point_exactly(const SearchPoint& p, const sched::Schedule& lowered);
  void reject_over_cap(const SearchPoint& p, int64_t need, const char* how);
  // The best estimates, planned exactly; a few more if the cap turns some of them away.
  void plan_best_estimates();
  // Ranked, with the rejected classes; throws UsageError when nothing was.
  PlannerResult finish();

  const PlannerRequest& r_;
  std::vector<int> degrees_;  // T
  std::vector<std::string> schedules_;
  std::vector<RecomputePolicy> policies_;
  std::vector<ShardChoice> shard_choices_;
  bool estimating_ = false;  // simulate_top > 0
  PointCosts costs_;
  PointEstimator estimator_;
  PlannerResult out_;
  Rejections rejected_;
  int64_t smallest_over_cap_ = 0;
  std::vector<SearchPoint> estimated_;
};

PlanSearch::PlanSearch(const ShardedCostsFor& costs_for, const PlannerRequest& r)
    : r_(r), estimating_(r.simulate_top > 0), costs_(costs_for, r), estimator_(costs_) {
  if (r.devices < 1)
    throw UsageError(fmt::format("--plan auto needs >= 1 device, not {}", r.devices));
  if (r.batch < 1) throw UsageError(fmt::format("--batch {} must be >= 1", r.batch));
  degrees_ = r.tensor_parallel.empty() ? std::vector<int>{1} : r.tensor_parallel;
  for (const int T : degrees_) check_tensor_parallel(T, r.devices, r.devices_per_node, r.heads);
  for (const int S : r.stages)
    if (S < 1 || std::none_of(degrees_.begin(), degrees_.end(),
                              [&](int T) { return (r.devices / T) % S == 0; }))
      throw UsageError(fmt::format(
          "--stages {}: no candidate has {} stages: S must divide the {} devices / T (T in {})", S,
          S, r.devices, fmt::join(degrees_, ",")));
  schedules_ = r.schedules.empty() ? planner_schedule_names() : r.schedules;
  policies_ = r.recompute.empty()
                  ? std::vector<RecomputePolicy>{{RecomputePolicy::Kind::never, 0},
                                                 {RecomputePolicy::Kind::except_last, 0},
                                                 {RecomputePolicy::Kind::always, 0}}
                  : r.recompute;
  shard_choices_ = r.shard.empty() ? std::vector<ShardChoice>{ShardChoice::none} : r.shard;
}

PlannerResult PlanSearch::run() {
  for (const int T : degrees_) {
    const int units = r_.devices / T;  // pipeline "devices" of T ranks each
    for (int R = 1; R <= units; ++R) {
      if (units % R != 0) continue;
      const int S = units / R;
      if (!r_.stages.empty() && std::find(r_.stages.begin(), r_.stages.end(), S) == r_.stages.end())
        continue;
      search_shape(T, S, R);
    }
  }
  if (estimating_) plan_best_estimates();
  return finish();
}

void PlanSearch::search_shape(int T, int S, int R) {
  const std::string shape = shape_text(T, S, R);
  // One replica holds its stages whole: full sharding needs R >= 2.
  std::vector<ShardChoice> shards;
  for (const ShardChoice sh : shard_choices_)
    if (sh == ShardChoice::none || R > 1) shards.push_back(sh);
  if (shards.empty()) {
    rejected_.add("(any)", "full sharding needs R >= 2",
                  fmt::format("{}: one replica has no other to share its stages with", shape));
    return;
  }
  if (r_.batch % R != 0) {
    rejected_.add(
        "(any)", "batch not divisible by R",
        fmt::format("{}: --batch {} does not split into {} equal replicas", shape, r_.batch, R));
    return;
  }
  const int64_t replica_batch = r_.batch / R;
  // On a cluster, both placements where their links differ (cluster.h).
  const int dpn = costs_.units_per_node(T);
  std::vector<Placement> placements{Placement::stages};
  if (dpn > 0 && (boundaries_crossing_nodes(S, R, dpn, Placement::stages) !=
                      boundaries_crossing_nodes(S, R, dpn, Placement::replicas) ||
                  allreduce_crosses_nodes(S, R, dpn, Placement::stages) !=
                      allreduce_crosses_nodes(S, R, dpn, Placement::replicas)))
    placements.push_back(Placement::replicas);
  for (const int M : divisors_up_to(replica_batch, r_.max_microbatches)) {
    const int64_t mb = replica_batch / M;
    const int L = static_cast<int>(costs_.layer_costs(mb, T).size());
    // One device per replica runs any schedule as plain accumulation (the orders differ in
    // memory only, and 1F1B's is the least): search one of them there.
    std::vector<std::string> searched = schedules_;
    if (S == 1 && searched.size() > 1) {
      const bool has_1f1b = std::find(searched.begin(), searched.end(), "1f1b") != searched.end();
      searched.assign(1, has_1f1b ? std::string("1f1b") : schedules_.front());
    }
    for (const std::string& name : searched) {
      SearchPoint p;
      p.T = T;
      p.S = S;
      p.R = R;
      p.M = M;
      p.mb = mb;
      p.name = name;
      search_schedule(std::move(p), L, placements, shards);
    }
  }
}

void PlanSearch::search_schedule(SearchPoint p, int L, const std::vector<Placement>& placements,
                                 const std::vector<ShardChoice>& shards) {
  const std::string where = fmt::format("{}, M = {}", shape_text(p.T, p.S, p.R), p.M);
  const int combinations = static_cast<int>(policies_.size() * placements.size() * shards.size());
  sched::Schedule lowered;
  const UnitRun* unit = nullptr;
  try {
    int num_stages = 0;
    if (estimating_) {
      // Every schedule has at least S stages: thousands of devices never generate one.
      num_stages = p.S;
      if (p.S <= L) {
        unit = &estimator_.unit_run(p);
        num_stages = unit->compute.num_stages;
        p.split_backward = splits_backward(unit->compute);
      }
    } else {
      const sched::Schedule compute = sched::generate(p.name, p.S, p.M);
      num_stages = compute.num_stages;
      p.split_backward = splits_backward(compute);
      if (num_stages <= L) lowered = lower_schedule(compute, p.R > 1, p.name);
    }
    if (num_stages > L) {
      rejected_.add(p.name, "more stages than layers",
                    fmt::format("{}: {} stages for {} layers", where, num_stages, L));
      out_.considered += combinations;
      return;
    }
  } catch (const std::exception& e) {  // invalid_argument (generator) or UsageError
    rejected_.add(p.name, "generator refused", fmt::format("{}: {}", where, e.what()));
    out_.considered += combinations;
    return;
  }
  for (const RecomputePolicy& policy : policies_) {
    // One stage is the last stage: except_last is never there.
    if (policy.kind == RecomputePolicy::Kind::except_last &&
        (estimating_ ? unit->compute.num_stages : lowered.num_stages) == 1)
      continue;
    p.policy = policy;
    for (const Placement placement : placements) {
      p.placement = placement;
      for (const ShardChoice shard : shards) {
        ++out_.considered;
        p.shard = shard;
        if (estimating_)
          estimate_point(p, *unit);
        else
          plan_point_exactly(p, lowered);
      }
    }
  }
}

void PlanSearch::estimate_point(SearchPoint p, const UnitRun& u) {
  const Estimate e = estimator_.estimate(p, u);
  if (e.over_cap_bytes > 0) {
    reject_over_cap(p, e.over_cap_bytes, " (estimated)");
    return;
  }
  p.estimate_s = e.step_s;
  estimated_.push_back(std::move(p));
}

void PlanSearch::plan_point_exactly(const SearchPoint& p, const sched::Schedule& lowered) {
  const std::vector<LayerProfile>& costs = costs_.layer_costs(p);
  ++out_.simulated;
  try {
    ExactPlan plan = planner_detail::plan_exactly(costs_, p, lowered, costs);
    if (plan.candidate)
      out_.ranked.push_back(std::move(*plan.candidate));
    else
      reject_over_cap(p, plan.over_cap_bytes, "");
  } catch (const std::exception& e) {
    rejected_.add(p.name, "could not be planned",
                  fmt::format("{}, recompute {}: {}", point_text(p), p.policy.str(), e.what()));
  }
}

void PlanSearch::reject_over_cap(const SearchPoint& p, int64_t need, const char* how) {
  smallest_over_cap_ = smallest_over_cap_ == 0 ? need : std::min(smallest_over_cap_, need);
  rejected_.add(p.name, fmt::format("over the memory cap{}", how),
                fmt::format("{}, recompute {}: needs {:.1f} MiB on a device, cap {:.1f} MiB",
                            point_text(p), p.policy.str(), mib(need), mib(r_.mem_cap_bytes)));
}

void PlanSearch::plan_best_estimates() {
  std::stable_sort(
      estimated_.begin(), estimated_.end(),
      [](const SearchPoint& a, const SearchPoint& b) { return a.estimate_s < b.estimate_s; });
  const size_t tries = std::min(estimated_.size(), 2 * static_cast<size_t>(r_.simulate_top));
  for (size_t i = 0; i < tries && out_.ranked.size() < static_cast<size_t>(r_.simulate_top); ++i) {
    const SearchPoint& p = estimated_[i];
    try {
      plan_point_exactly(p, lower_schedule(sched::generate(p.name, p.S, p.M), p.R > 1, p.name));
    } catch (const std::exception& e) {
      rejected_.add(p.name, "generator refused", fmt::format("{}: {}", point_text(p), e.what()));
    }
  }
}

PlannerResult PlanSearch::finish() {
  std::stable_sort(out_.ranked.begin(), out_.ranked.end(),
                   [](const PlanCandidate& a, const PlanCandidate& b) {
                     if (a.step_s != b.step_s) return a.step_s < b.step_s;
                     if (a.max_peak_bytes() != b.max_peak_bytes())
                       return a.max_peak_bytes() < b.max_peak_bytes();
                     return a.microbatches < b.microbatches;  // larger GEMMs
                   });
  out_.rejected = rejected_.take();
  int64_t smallest = smallest_over_cap_;
  for (const PlanCandidate& c : out_.ranked)
    smallest = smallest == 0 ? c.max_peak_bytes() : std::min(smallest, c.max_peak_bytes());
  out_.smallest_fitting_cap = smallest;
  if (out_.ranked.empty()) {
    if (smallest_over_cap_ > 0)
      throw UsageError(fmt::format(
          "--mem-cap {:.1f} MiB: no plan of the {} considered fits on {} device{}; the smallest "
          "cap any plan fits is {:.1f} MiB: raise --mem-cap to at least {:.1f}",
          mib(r_.mem_cap_bytes), out_.considered, r_.devices, r_.devices == 1 ? "" : "s",
          mib(smallest_over_cap_), std::ceil(mib(smallest_over_cap_) * 10) / 10));
    std::string why;
    for (const PlanRejection& j : out_.rejected) why += "\n  " + j.example;
    throw UsageError(fmt::format("--plan auto: none of the {} plans considered can run:{}",
                                 out_.considered, why));
  }
  return std::move(out_);
}

}  // namespace

int64_t PlanCandidate::max_peak_bytes() const {
  return peak_bytes.empty() ? 0 : *std::max_element(peak_bytes.begin(), peak_bytes.end());
}

std::vector<std::string> planner_schedule_names() {
  std::vector<std::string> out;
  for (const std::string& name : sched::schedule_names()) {
    if (name == "interleaved:V") {
      out.push_back("interleaved:2");
      out.push_back("interleaved:3");
    } else if (name.find(':') == std::string::npos) {
      out.push_back(name);
    }
  }
  return out;
}

PlannerResult search_plans(const CostsFor& costs_for, const PlannerRequest& r) {
  for (const int T : r.tensor_parallel)  // the message names why T > 1 needs sharded costs
    check_tensor_parallel(T, r.devices, r.devices_per_node, 0);
  return search_plans(
      ShardedCostsFor([&costs_for](int64_t mb, int) { return unsharded(costs_for(mb)); }), r);
}

PlannerResult search_plans(const ShardedCostsFor& costs_for, const PlannerRequest& r) {
  return PlanSearch(costs_for, r).run();
}

}  // namespace pt
