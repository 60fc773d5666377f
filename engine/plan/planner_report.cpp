// PlannerResult::report: the ranked plans as a table, then what was rejected and why (the text
// --plan auto and pipetrain-plan print).
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "engine/plan/full_shard.h"
#include "engine/plan/planner.h"

namespace pt {

namespace {

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

std::string PlannerResult::report(int k) const {
  std::string out = fmt::format(
      "plan auto: {} plans considered, {} fit; the fastest {} by predicted step time:\n",
      considered, ranked.size(), std::min<size_t>(static_cast<size_t>(k), ranked.size()));
  const bool sharded = std::any_of(ranked.begin(), ranked.end(),
                                   [](const PlanCandidate& c) { return c.tensor_parallel > 1; });
  const bool full = std::any_of(ranked.begin(), ranked.end(), [](const PlanCandidate& c) {
    return c.shard == ShardChoice::full;
  });
  // The last column, recompute, padded only where shard follows it.
  const auto last_columns = [full](const std::string& recompute, const char* shard) {
    return full ? fmt::format("{:<12} {}", recompute, shard) : recompute;
  };
  out += fmt::format("{:>4}  {:>10}  {:>7}  {:<22} {:>7} {:>4}  {:<14} {}\n", "rank", "step (ms)",
                     "bubble", "peak MiB per device", sharded ? "T x S x R" : "S x R", "M",
                     "schedule", last_columns("recompute", "shard"));
  for (size_t i = 0; i < ranked.size() && i < static_cast<size_t>(k); ++i) {
    const PlanCandidate& c = ranked[i];
    std::string peaks;
    for (int64_t p : c.peak_bytes)
      peaks += fmt::format("{}{:.1f}", peaks.empty() ? "" : " ", mib(p));
    out += fmt::format(
        "{:>4}  {:>10.2f}  {:>6.1f}%  {:<22} {:>7} {:>4}  {:<14} {}\n", i + 1, c.step_s * 1e3,
        100 * c.bubble, peaks,
        sharded ? fmt::format("{} x {} x {}", c.tensor_parallel, c.stages, c.replicas)
                : fmt::format("{} x {}", c.stages, c.replicas),
        c.microbatches, c.schedule, last_columns(c.recompute.str(), shard_name(c.shard)));
  }
  for (const PlanRejection& j : rejected)
    out += fmt::format("rejected {} ({} plan{}): {}, e.g. {}\n", j.schedule, j.count,
                       j.count == 1 ? "" : "s", j.why, j.example);
  return out;
}

}  // namespace pt
