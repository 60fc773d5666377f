#include "engine/partition/partitioner.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "engine/partition/byte_count.h"
#include "engine/partition/min_max_split.h"
#include "engine/partition/stage_cost.h"

namespace pt {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB ({} bytes)", static_cast<double>(bytes) / (1 << 20), bytes);
}

// ---- the checks every method shares ---------------------------------------------------------

void check_request(int L, size_t cost_count, const PartitionRequest& r) {
  if (r.stages < 1)
    throw UsageError(
        fmt::format("the number of pipeline stages must be >= 1 but is {}: use "
                    "--stages >= 1",
                    r.stages));
  if (r.stages > L)
    throw UsageError(
        fmt::format("cannot split {} layers into {} stages: use --stages <= {}", L, r.stages, L));
  if (cost_count != static_cast<size_t>(L))
    throw UsageError(
        fmt::format("the cost table has {} entries but the model has {} layers: "
                    "estimate or profile the costs of this model",
                    cost_count, L));
  if (!r.inflight_per_stage.empty()) {
    if (r.inflight_per_stage.size() != static_cast<size_t>(r.stages))
      throw UsageError(
          fmt::format("{} in-flight counts given for {} stages: give one per stage "
                      "(or none for 1 each)",
                      r.inflight_per_stage.size(), r.stages));
    for (size_t s = 0; s < r.inflight_per_stage.size(); ++s)
      if (r.inflight_per_stage[s] < 1)
        throw UsageError(
            fmt::format("stage {} keeps {} micro-batches in flight: every stage "
                        "holds at least 1",
                        s, r.inflight_per_stage[s]));
  }
  if (r.optimizer_slots < 0)
    throw UsageError(fmt::format("optimizer_slots is {}: use 0 (SGD), 1 (momentum) or 2 (AdamW)",
                                 r.optimizer_slots));
  if (r.mem_cap_bytes < 0)
    throw UsageError(fmt::format("the memory cap is {} bytes: use 0 (no cap) or a positive size",
                                 r.mem_cap_bytes));
}

// ---- explicit splits ------------------------------------------------------------------------

std::vector<int> bounds_from_counts(const std::vector<int>& counts) {
  std::vector<int> b{0};
  for (int c : counts) b.push_back(b.back() + c);
  return b;
}

// L / S layers each; the first L % S stages get one more.
std::vector<int> uniform_counts(int L, int S) {
  std::vector<int> c(static_cast<size_t>(S), L / S);
  for (int s = 0; s < L % S; ++s) ++c[static_cast<size_t>(s)];
  return c;
}

std::vector<int> checked_layout(const std::vector<int>& counts, int L, int S) {
  const std::string text = fmt::format("{}", fmt::join(counts, ","));
  if (counts.size() != static_cast<size_t>(S))
    throw UsageError(
        fmt::format("layout '{}' has {} entries but there are {} stages: give one "
                    "layer count per stage",
                    text, counts.size(), S));
  int64_t sum = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    if (counts[s] < 1)
      throw UsageError(
          fmt::format("layout '{}' gives stage {} {} layers: every stage needs at "
                      "least 1",
                      text, s, counts[s]));
    sum += counts[s];
  }
  if (sum != L)
    throw UsageError(
        fmt::format("layout '{}' covers {} layers but the model has {}: make the "
                    "counts add up to {}",
                    text, sum, L, L));
  return counts;
}

// ---- searched splits ------------------------------------------------------------------------

// time[i][j - i] = stage_time_s(i, j), built by the same in-order additions, so the DP's
// objective and the plan's max_stage_time() agree exactly. O(L^2) doubles.
std::vector<std::vector<double>> time_table(const std::vector<LayerProfile>& costs) {
  const size_t L = costs.size();
  std::vector<std::vector<double>> t(L + 1);
  for (size_t i = 0; i <= L; ++i) {
    t[i].resize(L - i + 1);
    t[i][0] = 0;
    for (size_t j = i + 1; j <= L; ++j) t[i][j - i] = t[i][j - i - 1] + costs[j - 1].total_s();
  }
  return t;
}

// Prefix sums of an integer field (exact, so any range sum equals the in-order sum), saturating
// (byte_count.h): a cost file's maxima overflow int64_t.
template <class Field>
std::vector<int64_t> prefix(const std::vector<LayerProfile>& costs, Field field) {
  std::vector<int64_t> p{0};
  for (const LayerProfile& c : costs) p.push_back(add_bytes(p.back(), c.*field));
  return p;
}

// Layers [i, j)'s sum of a field from its prefix sums: their difference while the prefix is
// exact, else (it saturated at or before j) the in-order sum itself, saturating as the rest.
template <class Field>
int64_t range_sum(const std::vector<int64_t>& p, const std::vector<LayerProfile>& costs,
                  Field field, size_t i, size_t j) {
  if (p[j] != kBytesBeyond) return p[j] - p[i];
  int64_t sum = 0;
  for (size_t l = i; l < j && sum != kBytesBeyond; ++l) sum = add_bytes(sum, costs[l].*field);
  return sum;
}

// The memory method: fastest split under the cap, or an error naming the smallest cap that fits.
std::vector<int> memory_bounds(const std::vector<LayerProfile>& costs, const PartitionRequest& r,
                               const std::vector<int>& inflight) {
  if (r.mem_cap_bytes <= 0)
    throw UsageError(
        "partition method 'memory' needs a memory cap per stage (mem_cap_bytes > 0, "
        "e.g. --mem-cap): give one, or use method 'time' to balance time alone");
  const int L = static_cast<int>(costs.size()), S = r.stages;
  const auto params = prefix(costs, &LayerProfile::param_bytes);
  const auto acts = prefix(costs, &LayerProfile::activation_bytes);
  const auto mem = [&](int s, int i, int j) {  // = stage_memory_bytes(costs, i, j, ...)
    const auto u = static_cast<size_t>(i), v = static_cast<size_t>(j);
    return add_bytes(times_bytes(2 + r.optimizer_slots,
                                 range_sum(params, costs, &LayerProfile::param_bytes, u, v)),
                     times_bytes(inflight[static_cast<size_t>(s)],
                                 range_sum(acts, costs, &LayerProfile::activation_bytes, u, v)));
  };
  const auto time = time_table(costs);
  auto b = min_max_split(L, S, [&](int s, int i, int j) {
    return mem(s, i, j) <= r.mem_cap_bytes
               ? time[static_cast<size_t>(i)][static_cast<size_t>(j - i)]
               : kInf;
  });
  if (!b.empty()) return b;

  // Nothing fits: the same search on memory finds the smallest cap any split fits under.
  b = min_max_split(L, S, [&](int s, int i, int j) { return static_cast<double>(mem(s, i, j)); });
  int worst = 0;
  for (int s = 1; s < S; ++s)
    if (mem(s, b[static_cast<size_t>(s)], b[static_cast<size_t>(s) + 1]) >
        mem(worst, b[static_cast<size_t>(worst)], b[static_cast<size_t>(worst) + 1]))
      worst = s;
  const int64_t need = mem(worst, b[static_cast<size_t>(worst)], b[static_cast<size_t>(worst) + 1]);
  throw UsageError(fmt::format(
      "no split of {} layers into {} stages fits the memory cap of {} per stage: the smallest cap "
      "any split fits is {} (stage {}, layers [{}, {})); raise the cap to at least that, use more "
      "stages, keep fewer micro-batches in flight, or use a smaller micro-batch",
      L, S, mib(r.mem_cap_bytes), mib(need), worst, b[static_cast<size_t>(worst)],
      b[static_cast<size_t>(worst) + 1]));
}

std::vector<int> searched_bounds(const std::vector<LayerProfile>& costs, const PartitionRequest& r,
                                 const std::vector<int>& inflight) {
  const int L = static_cast<int>(costs.size());
  if (r.method.kind == PartitionMethod::Kind::params) {
    const auto params = prefix(costs, &LayerProfile::param_bytes);
    return min_max_split(L, r.stages, [&](int, int i, int j) {
      return static_cast<double>(range_sum(params, costs, &LayerProfile::param_bytes,
                                           static_cast<size_t>(i), static_cast<size_t>(j)));
    });
  }
  if (r.method.kind == PartitionMethod::Kind::time) {
    const auto time = time_table(costs);
    return min_max_split(L, r.stages, [&](int, int i, int j) {
      return time[static_cast<size_t>(i)][static_cast<size_t>(j - i)];
    });
  }
  return memory_bounds(costs, r, inflight);
}

}  // namespace

// ---- Partition ------------------------------------------------------------------------------

double Partition::max_stage_time() const {
  double t = 0;
  for (const StagePlan& s : stages) t = std::max(t, s.time_s);
  return t;
}

std::vector<int> Partition::layout() const {
  std::vector<int> out;
  for (const StagePlan& s : stages) out.push_back(s.last_layer - s.first_layer);
  return out;
}

std::string Partition::table() const {
  std::string out = fmt::format(
      "partition '{}': {} stages, layers per stage {}, slowest stage {:.3f} ms per micro-batch\n",
      method.str(), stages.size(), fmt::join(layout(), ","), max_stage_time() * 1e3);
  out += fmt::format("{:>5}  {:<12} {:>12} {:>10} {:>12}\n", "stage", "layers", "params",
                     "time (ms)", "peak (MiB)");
  for (size_t s = 0; s < stages.size(); ++s) {
    const StagePlan& p = stages[s];
    out += fmt::format("{:>5}  {:<12} {:>12} {:>10.3f} {:>12.1f}\n", s,
                       fmt::format("[{}, {})", p.first_layer, p.last_layer), p.params,
                       p.time_s * 1e3, static_cast<double>(p.peak_memory_bytes) / (1 << 20));
  }
  return out;
}

Partition partition(const Model& model, const std::vector<LayerProfile>& costs,
                    const PartitionRequest& request) {
  check_request(model.num_layers(), costs.size(), request);
  return partition(costs, request);
}

Partition partition(const std::vector<LayerProfile>& costs, const PartitionRequest& request) {
  const int L = static_cast<int>(costs.size()), S = request.stages;
  check_request(L, costs.size(), request);
  std::vector<int> inflight = request.inflight_per_stage;
  if (inflight.empty()) inflight.assign(static_cast<size_t>(S), 1);

  std::vector<int> bounds;
  switch (request.method.kind) {
    case PartitionMethod::Kind::uniform: bounds = bounds_from_counts(uniform_counts(L, S)); break;
    case PartitionMethod::Kind::layout:
      bounds = bounds_from_counts(checked_layout(request.method.layout, L, S));
      break;
    case PartitionMethod::Kind::params:
    case PartitionMethod::Kind::time:
    case PartitionMethod::Kind::memory: bounds = searched_bounds(costs, request, inflight); break;
  }

  Partition out;
  out.method = request.method;
  for (int s = 0; s < S; ++s) {
    StagePlan p;
    p.first_layer = bounds[static_cast<size_t>(s)];
    p.last_layer = bounds[static_cast<size_t>(s) + 1];
    p.params =
        stage_param_bytes(costs, p.first_layer, p.last_layer) / static_cast<int64_t>(sizeof(float));
    p.time_s = stage_time_s(costs, p.first_layer, p.last_layer);
    p.peak_memory_bytes =
        stage_memory_bytes(costs, p.first_layer, p.last_layer, inflight[static_cast<size_t>(s)],
                           request.optimizer_slots);
    // A cap is a promise about every plan, not only the ones `memory` searched for.
    if (request.mem_cap_bytes > 0 && p.peak_memory_bytes > request.mem_cap_bytes)
      throw UsageError(fmt::format(
          "partition '{}' puts layers [{}, {}) on stage {}, which needs {}, over the memory cap "
          "of {}: use method 'memory' to search for a split that fits, or raise the cap",
          request.method.str(), p.first_layer, p.last_layer, s, mib(p.peak_memory_bytes),
          mib(request.mem_cap_bytes)));
    out.stages.push_back(p);
  }
  return out;
}

}  // namespace pt
