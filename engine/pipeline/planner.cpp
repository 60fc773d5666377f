#include "engine/pipeline/planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "engine/pipeline/plan.h"
#include "engine/pipeline/recompute_cost.h"
#include "schedule/generators.h"

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

// Ring all-reduce of each device's gradients over R replicas: the slowest device's.
double allreduce_s(const PlannerRequest& r, int replicas, const std::vector<int64_t>& grad_bytes) {
  if (replicas < 2) return 0;
  const int64_t most = *std::max_element(grad_bytes.begin(), grad_bytes.end());
  const double ring = 2.0 * (replicas - 1) / replicas;
  return ring * static_cast<double>(most) / r.allreduce_bytes_per_second +
         2.0 * (replicas - 1) * r.allreduce_latency_s;
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
  if (r.devices < 1)
    throw UsageError(fmt::format("--plan auto needs >= 1 device, not {}", r.devices));
  if (r.batch < 1) throw UsageError(fmt::format("--batch {} must be >= 1", r.batch));
  const std::vector<std::string> schedules =
      r.schedules.empty() ? planner_schedule_names() : r.schedules;
  const std::vector<RecomputePolicy> policies =
      r.recompute.empty() ? std::vector<RecomputePolicy>{{RecomputePolicy::Kind::never, 0},
                                                         {RecomputePolicy::Kind::except_last, 0},
                                                         {RecomputePolicy::Kind::always, 0}}
                          : r.recompute;
  PlannerResult out;
  Rejections rejected;
  std::map<int64_t, std::vector<LayerProfile>> cost_cache;  // by micro-batch size
  int64_t smallest_over_cap = 0;

  for (int R = 1; R <= r.devices; ++R) {
    if (r.devices % R != 0) continue;
    const int S = r.devices / R;
    const std::string shape = fmt::format("S x R = {} x {}", S, R);
    if (r.batch % R != 0) {
      rejected.add(
          "(any)", "batch not divisible by R",
          fmt::format("{}: --batch {} does not split into {} equal replicas", shape, r.batch, R));
      continue;
    }
    const int64_t replica_batch = r.batch / R;
    for (const int M : divisors_up_to(replica_batch, r.max_microbatches)) {
      const int64_t mb = replica_batch / M;
      auto cached = cost_cache.find(mb);
      if (cached == cost_cache.end()) cached = cost_cache.emplace(mb, costs_for(mb)).first;
      const std::vector<LayerProfile>& costs = cached->second;
      const int L = static_cast<int>(costs.size());
      // One device per replica runs any schedule as plain accumulation (the orders differ in
      // memory only, and 1F1B's is the least): search one of them there.
      std::vector<std::string> searched = schedules;
      if (S == 1 && searched.size() > 1) {
        const bool has_1f1b = std::find(searched.begin(), searched.end(), "1f1b") != searched.end();
        searched.assign(1, has_1f1b ? std::string("1f1b") : schedules.front());
      }
      for (const std::string& name : searched) {
        const std::string where = fmt::format("{}, M = {}", shape, M);
        sched::Schedule lowered;
        try {
          const sched::Schedule compute = sched::generate(name, S, M);
          if (compute.num_stages > L) {
            rejected.add(name, "more stages than layers",
                         fmt::format("{}: {} stages for {} layers", where, compute.num_stages, L));
            out.considered += static_cast<int>(policies.size());
            continue;
          }
          lowered = lower_schedule(compute, R > 1, name);
        } catch (const std::exception& e) {  // invalid_argument (generator) or UsageError
          rejected.add(name, "generator refused", fmt::format("{}: {}", where, e.what()));
          out.considered += static_cast<int>(policies.size());
          continue;
        }
        for (const RecomputePolicy& policy : policies) {
          // One stage is the last stage: except_last is never there.
          if (policy.kind == RecomputePolicy::Kind::except_last && lowered.num_stages == 1)
            continue;
          ++out.considered;
          PlanRequest pr;
          pr.devices = S;
          pr.microbatches = M;
          pr.batch = replica_batch;
          pr.optimizer_slots = r.optimizer_slots;
          pr.transfer_bytes_per_second = r.transfer_bytes_per_second;
          pr.data_parallel = R > 1;
          pr.recompute = policy;
          pr.partition = {PartitionMethod::Kind::time, {}};
          const auto device_memory = [&](const PipelinePlan& plan) {
            std::vector<int64_t> peak(static_cast<size_t>(S), 0), grads(peak);
            const int stages = static_cast<int>(plan.partition.stages.size());
            for (int k = 0; k < stages; ++k) {
              const StagePlan& st = plan.partition.stages[static_cast<size_t>(k)];
              const auto d = static_cast<size_t>(plan.schedule.device_of(k));
              peak[d] += stage_memory_bytes(costs, st.first_layer, st.last_layer,
                                            plan.simulated.peak_inflight[static_cast<size_t>(k)],
                                            r.optimizer_slots, policy, k == stages - 1);
              grads[d] += st.params * static_cast<int64_t>(sizeof(float));
            }
            return std::pair{peak, grads};
          };
          try {
            PipelinePlan plan = plan_with_costs(lowered, costs, pr, name, "");
            auto [peak, grads] = device_memory(plan);
            const auto over = [&](const std::vector<int64_t>& p) {
              return r.mem_cap_bytes > 0 && *std::max_element(p.begin(), p.end()) > r.mem_cap_bytes;
            };
            // Without recomputation and one chunk per device, the partitioner's own memory
            // model is this one: let it search for a split under the cap.
            if (over(peak) && policy.kind == RecomputePolicy::Kind::never &&
                lowered.num_stages == S) {
              const int64_t unbalanced = *std::max_element(peak.begin(), peak.end());
              pr.partition = {PartitionMethod::Kind::memory, {}};
              pr.mem_cap_bytes = r.mem_cap_bytes;
              try {
                plan = plan_with_costs(lowered, costs, pr, name, "");
                std::tie(peak, grads) = device_memory(plan);
              } catch (const UsageError&) {
                peak.assign(1, unbalanced);  // nothing fits: keep the time split's figure
              }
            }
            if (over(peak)) {
              const int64_t need = *std::max_element(peak.begin(), peak.end());
              smallest_over_cap = smallest_over_cap == 0 ? need : std::min(smallest_over_cap, need);
              rejected.add(name, "over the memory cap",
                           fmt::format("{}, recompute {}: needs {:.1f} MiB on a device, cap "
                                       "{:.1f} MiB",
                                       where, policy.str(), mib(need), mib(r.mem_cap_bytes)));
              continue;
            }
            PlanCandidate c;
            c.stages = S;
            c.replicas = R;
            c.microbatches = M;
            c.schedule = name;
            c.recompute = policy;
            c.layout = plan.partition.layout();
            c.partition = pr.partition;
            c.pipeline_s = plan.simulated.step_time;
            c.allreduce_s = allreduce_s(r, R, grads);
            c.step_s = c.pipeline_s + c.allreduce_s;
            double busy = 0;
            for (double b : plan.simulated.busy) busy += b;
            c.bubble = 1 - busy / static_cast<double>(plan.simulated.busy.size()) / c.step_s;
            c.peak_bytes = std::move(peak);
            out.ranked.push_back(std::move(c));
          } catch (const std::exception& e) {
            rejected.add(name, "could not be planned",
                         fmt::format("{}, recompute {}: {}", where, policy.str(), e.what()));
          }
        }
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

std::string PlannerResult::report(int k) const {
  std::string out = fmt::format(
      "plan auto: {} plans considered, {} fit; the fastest {} by predicted step time:\n",
      considered, ranked.size(), std::min<size_t>(static_cast<size_t>(k), ranked.size()));
  out += fmt::format("{:>4}  {:>10}  {:>7}  {:<22} {:>7} {:>4}  {:<14} {}\n", "rank", "step (ms)",
                     "bubble", "peak MiB per device", "S x R", "M", "schedule", "recompute");
  for (size_t i = 0; i < ranked.size() && i < static_cast<size_t>(k); ++i) {
    const PlanCandidate& c = ranked[i];
    std::string peaks;
    for (int64_t p : c.peak_bytes)
      peaks += fmt::format("{}{:.1f}", peaks.empty() ? "" : " ", mib(p));
    out += fmt::format("{:>4}  {:>10.2f}  {:>6.1f}%  {:<22} {:>7} {:>4}  {:<14} {}\n", i + 1,
                       c.step_s * 1e3, 100 * c.bubble, peaks,
                       fmt::format("{} x {}", c.stages, c.replicas), c.microbatches, c.schedule,
                       c.recompute.str());
  }
  for (const PlanRejection& j : rejected)
    out += fmt::format("rejected {} ({} plan{}): {}, e.g. {}\n", j.schedule, j.count,
                       j.count == 1 ? "" : "s", j.why, j.example);
  return out;
}

}  // namespace pt
