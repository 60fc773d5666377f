#include "engine/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "engine/partition/byte_count.h"
#include "engine/plan/plan.h"
#include "engine/plan/recompute_cost.h"
#include "engine/plan/tensor_parallel.h"
#include "schedule/generators.h"
#include "schedule/simulate.h"

namespace pt {

namespace {

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

// With T ranks per stage innermost, a node holds devices_per_node / T pipeline "devices" (0: one
// node, as --plan auto).
int units_per_node(const PlannerRequest& r, int T) {
  return r.devices_per_node > 0 ? r.devices_per_node / T : 0;
}

// The link of the data-parallel group (the R replicas of one pipeline device): the inter-node
// one where some group spans nodes, the all-reduce's figures within a node otherwise.
Link data_parallel_link(const PlannerRequest& r, int T, int S, int replicas, Placement placement) {
  if (allreduce_crosses_nodes(S, replicas, units_per_node(r, T), placement)) return r.inter_node;
  return {r.allreduce_bytes_per_second, r.allreduce_latency_s};
}

// Ring all-reduce of each device's gradients over R replicas: the slowest device's, over the
// slowest link the ring crosses. With T > 1 each rank reduces its own share (grad_bytes are a
// rank's), all T rings at once, each GPU over its own link.
double allreduce_s(const PlannerRequest& r, int T, int S, int replicas,
                   const std::vector<int64_t>& grad_bytes, Placement placement) {
  if (replicas < 2) return 0;
  const int64_t most = *std::max_element(grad_bytes.begin(), grad_bytes.end());
  const double ring = 2.0 * (replicas - 1) / replicas;
  const Link link = data_parallel_link(r, T, S, replicas, placement);
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

// The step's epilogue (step_overheads.h) for a replica with these gradient bytes per device.
double epilogue_s(const PlannerRequest& r, const std::vector<int64_t>& grad_bytes) {
  int64_t total = 0;
  for (int64_t b : grad_bytes) total = add_bytes(total, b);
  const int64_t most = *std::max_element(grad_bytes.begin(), grad_bytes.end());
  constexpr auto f32 = static_cast<int64_t>(sizeof(float));
  return r.overheads.seconds(total / f32, most / f32);
}

// "S x R = 4 x 2", or "T x S x R = 8 x 4 x 2" with tensor parallelism.
std::string shape_text(int T, int S, int R) {
  return T > 1 ? fmt::format("T x S x R = {} x {} x {}", T, S, R)
               : fmt::format("S x R = {} x {}", S, R);
}

// One point of the search: T x S x R devices, M micro-batches of `mb` samples, a schedule, a
// policy, a placement and whether the stages are sharded over the replicas.
struct Point {
  int T = 1, S = 1, R = 1, M = 1;
  int64_t mb = 1;
  std::string name;
  RecomputePolicy policy;
  Placement placement = Placement::stages;
  ShardChoice shard = ShardChoice::none;
  bool split_backward = false;  // the schedule runs I and W apart (full sharding gathers for W)
  double estimate_s = 0;        // simulate_top > 0: the estimated step
};

// Whether some device's list has a W: the schedule splits the backward (zero-bubble).
bool splits_backward(const sched::Schedule& schedule) {
  for (const auto& list : schedule.actions)
    for (const sched::Action& a : list)
      if (a.type == sched::ActionType::W) return true;
  return false;
}

// "S x R = 4 x 2, shard full, M = 8": the point's shape for a rejection's example.
std::string point_text(const Point& p) {
  return fmt::format("{}{}, M = {}", shape_text(p.T, p.S, p.R),
                     p.shard == ShardChoice::full ? ", shard full" : "", p.M);
}

// A schedule simulated with unit times at M' micro-batches (see search_plans' comment).
struct UnitRun {
  sched::Schedule compute;  // at M'
  sched::SimResult sim;
};

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
  if (r.devices < 1)
    throw UsageError(fmt::format("--plan auto needs >= 1 device, not {}", r.devices));
  if (r.batch < 1) throw UsageError(fmt::format("--batch {} must be >= 1", r.batch));
  const std::vector<int> degrees =
      r.tensor_parallel.empty() ? std::vector<int>{1} : r.tensor_parallel;
  for (const int T : degrees) check_tensor_parallel(T, r.devices, r.devices_per_node, r.heads);
  for (const int S : r.stages)
    if (S < 1 || std::none_of(degrees.begin(), degrees.end(),
                              [&](int T) { return (r.devices / T) % S == 0; }))
      throw UsageError(fmt::format(
          "--stages {}: no candidate has {} stages: S must divide the {} devices / T (T in {})", S,
          S, r.devices, fmt::join(degrees, ",")));
  const std::vector<std::string> schedules =
      r.schedules.empty() ? planner_schedule_names() : r.schedules;
  const std::vector<RecomputePolicy> policies =
      r.recompute.empty() ? std::vector<RecomputePolicy>{{RecomputePolicy::Kind::never, 0},
                                                         {RecomputePolicy::Kind::except_last, 0},
                                                         {RecomputePolicy::Kind::always, 0}}
                          : r.recompute;
  const std::vector<ShardChoice> shard_choices =
      r.shard.empty() ? std::vector<ShardChoice>{ShardChoice::none} : r.shard;
  const bool estimating = r.simulate_top > 0;
  PlannerResult out;
  Rejections rejected;
  std::map<std::pair<int64_t, int>, std::vector<LayerProfile>> cost_cache;  // by (mb, T)
  int64_t smallest_over_cap = 0;
  // One rank's costs, its tensor-parallel all-reduces priced on the node's all-reduce link.
  const Link within_node{r.allreduce_bytes_per_second, r.allreduce_latency_s};
  const auto costs_of = [&](int64_t mb, int T) -> const std::vector<LayerProfile>& {
    auto cached = cost_cache.find({mb, T});
    if (cached == cost_cache.end())
      cached = cost_cache
                   .emplace(std::pair{mb, T},
                            with_tensor_parallel_traffic(costs_for(mb, T), T, within_node))
                   .first;
    return cached->second;
  };
  // A point's costs: with full sharding each layer waits for its parameter all-gathers over the
  // data-parallel link (full_shard.h), by (mb, T, R, whether the group spans nodes, whether the
  // schedule splits the backward); mb and R set M = B / (R mb).
  std::map<std::tuple<int64_t, int, int, bool, bool>, std::vector<LayerProfile>> gathered_cache;
  const auto costs_at = [&](const Point& p) -> const std::vector<LayerProfile>& {
    if (p.shard == ShardChoice::none) return costs_of(p.mb, p.T);
    const bool across = allreduce_crosses_nodes(p.S, p.R, units_per_node(r, p.T), p.placement);
    const std::tuple key{p.mb, p.T, p.R, across, p.split_backward};
    auto cached = gathered_cache.find(key);
    if (cached == gathered_cache.end())
      cached = gathered_cache
                   .emplace(key, with_full_shard_gathers(
                                     costs_of(p.mb, p.T), p.R, p.M,
                                     data_parallel_link(r, p.T, p.S, p.R, p.placement),
                                     r.shard_prefetch, p.split_backward))
                   .first;
    return cached->second;
  };
  // Per device of one replica: peak bytes and the gradient bytes the epilogue and the all-reduce
  // see, sharded or not.
  const auto memory_at = [&](const Point& p, const sched::Schedule& schedule, const Partition& part,
                             const std::vector<int>& inflight,
                             const std::vector<LayerProfile>& costs) {
    if (p.shard == ShardChoice::full)
      return full_shard_device_memory(schedule, part, inflight, costs, r.optimizer_slots, p.policy,
                                      p.R, p.M, r.shard_prefetch);
    return device_memory(schedule, part, inflight, costs, r.optimizer_slots, p.policy);
  };
  // After the pipeline: the gradient all-reduce, or (shard full) the slowest device's
  // reduce-scatters.
  const auto gradient_sync_s = [&](const Point& p, const sched::Schedule& schedule,
                                   const Partition& part, const std::vector<LayerProfile>& costs,
                                   const std::vector<int64_t>& grads) {
    if (p.shard == ShardChoice::none) return allreduce_s(r, p.T, p.S, p.R, grads, p.placement);
    return full_shard_step_reduce_s(schedule, part, costs, p.R,
                                    data_parallel_link(r, p.T, p.S, p.R, p.placement),
                                    r.shard_prefetch);
  };
  // Shard full: what the gathers add to the busiest device's step, M micro-batches of each of its
  // layers' F, I and W (a recomputed forward reuses the backward's gather: recompute_cost.h).
  const auto gather_s = [&](const Point& p, const sched::Schedule& schedule,
                            const Partition& part) {
    if (p.shard == ShardChoice::none) return 0.0;
    return full_shard_gather_added_s(schedule, part, costs_of(p.mb, p.T), costs_at(p), p.M);
  };
  const auto over_cap = [&](const std::vector<int64_t>& peak) {
    return r.mem_cap_bytes > 0 && *std::max_element(peak.begin(), peak.end()) > r.mem_cap_bytes;
  };
  const auto reject_over_cap = [&](const Point& p, int64_t need, const char* how) {
    smallest_over_cap = smallest_over_cap == 0 ? need : std::min(smallest_over_cap, need);
    rejected.add(p.name, fmt::format("over the memory cap{}", how),
                 fmt::format("{}, recompute {}: needs {:.1f} MiB on a device, cap {:.1f} MiB",
                             point_text(p), p.policy.str(), mib(need), mib(r.mem_cap_bytes)));
  };
  const auto links_for = [&](int T, int S, int R, Placement placement) {
    std::vector<Link> links;
    if (r.devices_per_node <= 0) return links;
    for (const bool across : boundaries_crossing_nodes(S, R, units_per_node(r, T), placement))
      links.push_back(across ? r.inter_node
                             : Link{r.transfer_bytes_per_second, r.transfer_latency_s});
    return links;
  };

  // The exact plan of one point, as a run with those flags plans it; ranked or rejected.
  const auto plan_exactly = [&](const Point& p, const sched::Schedule& lowered) {
    const std::vector<LayerProfile>& costs = costs_at(p);
    ++out.simulated;
    const std::string where = point_text(p);
    PlanRequest pr;
    pr.devices = p.S;
    pr.microbatches = p.M;
    pr.batch = r.batch / p.R;
    pr.optimizer_slots = r.optimizer_slots;
    pr.transfer_bytes_per_second = r.transfer_bytes_per_second;
    pr.transfer_latency_s = r.transfer_latency_s;
    pr.device_links = links_for(p.T, p.S, p.R, p.placement);
    pr.data_parallel = p.R > 1;
    pr.recompute = p.policy;
    pr.partition = {PartitionMethod::Kind::time, {}};
    const auto memory = [&](const PipelinePlan& plan) {
      return memory_at(p, plan.schedule, plan.partition, plan.simulated.peak_inflight, costs);
    };
    try {
      PipelinePlan plan = plan_with_costs(lowered, costs, pr, p.name, "");
      auto [peak, grads] = memory(plan);
      // Without recomputation, sharding and one chunk per device, the partitioner's own memory
      // model is this one: let it search for a split under the cap.
      if (over_cap(peak) && p.policy.kind == RecomputePolicy::Kind::never &&
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
      if (over_cap(peak)) {
        reject_over_cap(p, *std::max_element(peak.begin(), peak.end()), "");
        return;
      }
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
      c.allreduce_s = gradient_sync_s(p, plan.schedule, plan.partition, costs, grads);
      c.gather_s = gather_s(p, plan.schedule, plan.partition);
      c.placement = p.placement;
      c.epilogue_s = epilogue_s(r, grads);
      c.step_s = c.pipeline_s + c.allreduce_s + c.epilogue_s;
      c.estimate_s = p.estimate_s;
      double busy = 0;
      for (double b : plan.simulated.busy) busy += b;
      c.bubble = 1 - busy / static_cast<double>(plan.simulated.busy.size()) /
                         (c.pipeline_s + c.allreduce_s);
      c.peak_bytes = std::move(peak);
      out.ranked.push_back(std::move(c));
    } catch (const std::exception& e) {
      rejected.add(p.name, "could not be planned",
                   fmt::format("{}, recompute {}: {}", where, p.policy.str(), e.what()));
    }
  };

  // ---- the estimate (simulate_top > 0) ------------------------------------------------------
  std::map<std::tuple<std::string, int, int>, UnitRun> unit_runs;  // (name, S, M')
  // By time, per cost table (costs_at's, which live as long as their caches) and stage count.
  std::map<std::pair<const std::vector<LayerProfile>*, int>, Partition> splits;
  std::vector<Point> estimated;
  // The unit run of (name, S, M'), or nullptr after recording why the generator refused.
  const auto unit_run = [&](const Point& p) -> const UnitRun* {
    const int m = std::min(p.M, 6 * p.S);
    auto it = unit_runs.find({p.name, p.S, m});
    if (it == unit_runs.end()) {
      UnitRun u;
      u.compute = sched::generate(p.name, p.S, m);  // throws for a refused (S, M)
      u.sim = sched::simulate(u.compute);
      it = unit_runs.emplace(std::tuple{p.name, p.S, m}, std::move(u)).first;
    }
    return &it->second;
  };
  const auto estimate = [&](Point p, const UnitRun& u) {
    const std::vector<LayerProfile>& costs = costs_at(p);
    const int stages = u.compute.num_stages;
    auto split = splits.find({&costs, stages});
    if (split == splits.end()) {
      PartitionRequest pq;
      pq.method = {PartitionMethod::Kind::time, {}};
      pq.stages = stages;
      split = splits.emplace(std::pair{&costs, stages}, partition(costs, pq)).first;
    }
    const Partition* chosen = &split->second;
    const int m = u.compute.microbatches;
    std::vector<int> inflight = u.sim.peak_inflight;
    for (int& f : inflight)
      if (f == m) f = p.M;  // it holds every micro-batch (GPipe): all M
    auto [peak, grads] = memory_at(p, u.compute, *chosen, inflight, costs);
    // As plan_exactly: without recomputation, sharding and one chunk per device, a split under
    // the cap.
    Partition under_cap;
    if (over_cap(peak) && p.policy.kind == RecomputePolicy::Kind::never &&
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
        std::tie(peak, grads) =
            device_memory(u.compute, *chosen, inflight, costs, r.optimizer_slots, p.policy);
      } catch (const UsageError&) {  // nothing fits: keep the time split's figure
      }
    }
    const Partition& part = *chosen;
    if (over_cap(peak)) {
      reject_over_cap(p, *std::max_element(peak.begin(), peak.end()), " (estimated)");
      return;
    }
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
    links.device_links = links_for(p.T, p.S, p.R, p.placement);
    for (int k = 0; k + 1 < stages; ++k)
      if (u.compute.device_of(k) != u.compute.device_of(k + 1))
        transfers += boundary_transfer_s(
            links, u.compute, k,
            static_cast<double>(
                costs[static_cast<size_t>(part.stages[static_cast<size_t>(k)].last_layer - 1)]
                    .output_bytes));
    p.estimate_s = p.M * real[slow] + idle_units * per_unit + 2 * transfers +
                   gradient_sync_s(p, u.compute, part, costs, grads) + epilogue_s(r, grads);
    estimated.push_back(std::move(p));
  };

  for (const int T : degrees) {
    const int units = r.devices / T;  // pipeline "devices" of T ranks each
    const int dpn = units_per_node(r, T);
    for (int R = 1; R <= units; ++R) {
      if (units % R != 0) continue;
      const int S = units / R;
      if (!r.stages.empty() && std::find(r.stages.begin(), r.stages.end(), S) == r.stages.end())
        continue;
      const std::string shape = shape_text(T, S, R);
      // One replica holds its stages whole: full sharding needs R >= 2.
      std::vector<ShardChoice> shards;
      for (const ShardChoice sh : shard_choices)
        if (sh == ShardChoice::none || R > 1) shards.push_back(sh);
      if (shards.empty()) {
        rejected.add("(any)", "full sharding needs R >= 2",
                     fmt::format("{}: one replica has no other to share its stages with", shape));
        continue;
      }
      if (r.batch % R != 0) {
        rejected.add(
            "(any)", "batch not divisible by R",
            fmt::format("{}: --batch {} does not split into {} equal replicas", shape, r.batch, R));
        continue;
      }
      const int64_t replica_batch = r.batch / R;
      // On a cluster, both placements where their links differ (cluster.h).
      std::vector<Placement> placements{Placement::stages};
      if (dpn > 0 && (boundaries_crossing_nodes(S, R, dpn, Placement::stages) !=
                          boundaries_crossing_nodes(S, R, dpn, Placement::replicas) ||
                      allreduce_crosses_nodes(S, R, dpn, Placement::stages) !=
                          allreduce_crosses_nodes(S, R, dpn, Placement::replicas)))
        placements.push_back(Placement::replicas);
      for (const int M : divisors_up_to(replica_batch, r.max_microbatches)) {
        const int64_t mb = replica_batch / M;
        const int L = static_cast<int>(costs_of(mb, T).size());
        // One device per replica runs any schedule as plain accumulation (the orders differ in
        // memory only, and 1F1B's is the least): search one of them there.
        std::vector<std::string> searched = schedules;
        if (S == 1 && searched.size() > 1) {
          const bool has_1f1b =
              std::find(searched.begin(), searched.end(), "1f1b") != searched.end();
          searched.assign(1, has_1f1b ? std::string("1f1b") : schedules.front());
        }
        for (const std::string& name : searched) {
          const std::string where = fmt::format("{}, M = {}", shape, M);
          Point p{T, S, R, M, mb, name, {}, Placement::stages, ShardChoice::none, 0};
          sched::Schedule lowered;
          const UnitRun* unit = nullptr;
          try {
            int num_stages = 0;
            if (estimating) {
              // Every schedule has at least S stages: thousands of devices never generate one.
              num_stages = S;
              if (S <= L) {
                unit = unit_run(p);
                num_stages = unit->compute.num_stages;
                p.split_backward = splits_backward(unit->compute);
              }
            } else {
              const sched::Schedule compute = sched::generate(name, S, M);
              num_stages = compute.num_stages;
              p.split_backward = splits_backward(compute);
              if (num_stages <= L) lowered = lower_schedule(compute, R > 1, name);
            }
            if (num_stages > L) {
              rejected.add(name, "more stages than layers",
                           fmt::format("{}: {} stages for {} layers", where, num_stages, L));
              out.considered +=
                  static_cast<int>(policies.size() * placements.size() * shards.size());
              continue;
            }
          } catch (const std::exception& e) {  // invalid_argument (generator) or UsageError
            rejected.add(name, "generator refused", fmt::format("{}: {}", where, e.what()));
            out.considered += static_cast<int>(policies.size() * placements.size() * shards.size());
            continue;
          }
          for (const RecomputePolicy& policy : policies) {
            // One stage is the last stage: except_last is never there.
            if (policy.kind == RecomputePolicy::Kind::except_last &&
                (estimating ? unit->compute.num_stages : lowered.num_stages) == 1)
              continue;
            p.policy = policy;
            for (const Placement placement : placements) {
              p.placement = placement;
              for (const ShardChoice shard : shards) {
                ++out.considered;
                p.shard = shard;
                if (estimating)
                  estimate(p, *unit);
                else
                  plan_exactly(p, lowered);
              }
            }
          }
        }
      }
    }
  }
  if (estimating) {
    // The best estimates, planned exactly; a few more if the cap turns some of them away.
    std::stable_sort(estimated.begin(), estimated.end(),
                     [](const Point& a, const Point& b) { return a.estimate_s < b.estimate_s; });
    const size_t tries = std::min(estimated.size(), 2 * static_cast<size_t>(r.simulate_top));
    for (size_t i = 0; i < tries && out.ranked.size() < static_cast<size_t>(r.simulate_top); ++i) {
      const Point& p = estimated[i];
      try {
        plan_exactly(p, lower_schedule(sched::generate(p.name, p.S, p.M), p.R > 1, p.name));
      } catch (const std::exception& e) {
        rejected.add(p.name, "generator refused", fmt::format("{}: {}", point_text(p), e.what()));
      }
    }
  }
  std::stable_sort(out.ranked.begin(), out.ranked.end(),
                   [](const PlanCandidate& a, const PlanCandidate& b) {
                     if (a.step_s != b.step_s) return a.step_s < b.step_s;
                     if (a.max_peak_bytes() != b.max_peak_bytes())
                       return a.max_peak_bytes() < b.max_peak_bytes();
                     return a.microbatches < b.microbatches;  // larger GEMMs
                   });
  out.rejected = rejected.take();
  int64_t smallest = smallest_over_cap;
  for (const PlanCandidate& c : out.ranked)
    smallest = smallest == 0 ? c.max_peak_bytes() : std::min(smallest, c.max_peak_bytes());
  out.smallest_fitting_cap = smallest;
  if (out.ranked.empty()) {
    if (smallest_over_cap > 0)
      throw UsageError(fmt::format(
          "--mem-cap {:.1f} MiB: no plan of the {} considered fits on {} device{}; the smallest "
          "cap any plan fits is {:.1f} MiB: raise --mem-cap to at least {:.1f}",
          mib(r.mem_cap_bytes), out.considered, r.devices, r.devices == 1 ? "" : "s",
          mib(smallest_over_cap), std::ceil(mib(smallest_over_cap) * 10) / 10));
    std::string why;
    for (const PlanRejection& j : out.rejected) why += "\n  " + j.example;
    throw UsageError(fmt::format("--plan auto: none of the {} plans considered can run:{}",
                                 out.considered, why));
  }
  return out;
}

}  // namespace pt
