// The planner (engine/plan/planner.h) on synthetic cost tables whose best plan is known by
// construction, the recompute cost model it uses, and the refusals around --plan auto.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/plan/planner.h"
#include "engine/plan/recompute_cost.h"
#include "engine/setup/training_options.h"

using namespace pt;

namespace {

#define CHECK_USAGE(expr, text) CHECK_THROWS_WITH_AS(expr, doctest::Contains(text), UsageError)

// Per-sample costs scaled by the micro-batch size, as compute and activations scale.
struct SyntheticLayer {
  double seconds_per_sample;  // each of F, I and W
  int64_t param_bytes;
  int64_t activation_bytes_per_sample;
};

CostsFor linear_costs(std::vector<SyntheticLayer> layers) {
  return [layers](int64_t mb) {
    std::vector<LayerProfile> out;
    for (const SyntheticLayer& l : layers) {
      LayerProfile p;
      p.forward_s = p.backward_input_s = p.backward_weight_s =
          l.seconds_per_sample * static_cast<double>(mb);
      p.param_bytes = l.param_bytes;
      p.activation_bytes = l.activation_bytes_per_sample * mb;
      p.output_bytes = 64 * mb;
      out.push_back(p);
    }
    return out;
  };
}

bool finite_and_positive(const PlanCandidate& c) {
  return std::isfinite(c.step_s) && c.step_s > 0 && std::isfinite(c.bubble);
}

}  // namespace

TEST_CASE("planner: the searched schedules come from the registry") {
  const std::vector<std::string> names = planner_schedule_names();
  for (const char* want : {"gpipe", "1f1b", "zb-h1", "interleaved:2", "interleaved:3"})
    CHECK(std::find(names.begin(), names.end(), want) != names.end());
  for (const std::string& n : names) CHECK(n.find("file:") == std::string::npos);
  CHECK(std::find(names.begin(), names.end(), "interleaved:V") == names.end());
}

TEST_CASE("planner: one huge layer cannot be pipelined, so data parallelism wins") {
  // Layer 0 is 100x any other: whatever the split, one stage holds it for every micro-batch,
  // so a 2-stage pipeline takes >= its time over the whole batch; two replicas take half.
  PlannerRequest r;
  r.devices = 2;
  r.batch = 64;
  const PlannerResult res = search_plans(
      linear_costs({{1e-3, 4096, 256}, {1e-5, 4096, 256}, {1e-5, 4096, 256}, {1e-5, 4096, 256}}),
      r);
  REQUIRE(!res.ranked.empty());
  const PlanCandidate& best = res.ranked.front();
  CHECK(finite_and_positive(best));
  CHECK(best.replicas == 2);
  CHECK(best.stages == 1);
  // The best pipeline is at least ~1.9x slower (the huge layer over the whole batch).
  const auto pipe = std::find_if(res.ranked.begin(), res.ranked.end(),
                                 [](const PlanCandidate& c) { return c.stages == 2; });
  REQUIRE(pipe != res.ranked.end());
  CHECK(pipe->step_s > 1.9 * best.step_s);
  // Sorted by predicted step time.
  for (size_t i = 1; i < res.ranked.size(); ++i)
    CHECK(res.ranked[i - 1].step_s <= res.ranked[i].step_s);
  // The table says it.
  const std::string table = res.report(3);
  CHECK(table.find("1 x 2") != std::string::npos);
  CHECK(table.find("rank") != std::string::npos);
}

TEST_CASE("planner: an expensive all-reduce makes the pipeline win, with many micro-batches") {
  // Eight equal layers with 1 GiB of parameters each: the all-reduce of two replicas at 10 GB/s
  // takes seconds, the pipeline's bubble milliseconds.
  PlannerRequest r;
  r.devices = 2;
  r.batch = 32;
  std::vector<SyntheticLayer> layers(8, {1e-4, int64_t{1} << 30, 256});
  const PlannerResult res = search_plans(linear_costs(layers), r);
  REQUIRE(!res.ranked.empty());
  const PlanCandidate& best = res.ranked.front();
  CHECK(finite_and_positive(best));
  CHECK(best.replicas == 1);
  CHECK(best.stages == 2);
  CHECK(best.allreduce_s == 0);
  CHECK(best.layout.size() >= 2);
  // Equal layers and free transfers: the more micro-batches, the smaller the fill and drain.
  CHECK(best.microbatches >= 16);
  // The all-reduce of the replicated plan: 2 (R - 1) / R x 8 GiB / 10 GB/s + 2 x 20 us.
  const auto dp = std::find_if(res.ranked.begin(), res.ranked.end(),
                               [](const PlanCandidate& c) { return c.replicas == 2; });
  REQUIRE(dp != res.ranked.end());
  CHECK(dp->allreduce_s == doctest::Approx(8.0 * (1 << 30) / 10e9 + 40e-6));
}

TEST_CASE("planner: the step's epilogue is added per replica and per fullest device") {
  // Zeroing and the norm stream the replica's parameters on one thread; the update runs on every
  // device at once, so the fullest device's parameters set it.
  PlannerRequest r;
  r.devices = 2;
  r.batch = 16;
  r.overheads = {1e-6, 3e-6};
  const std::vector<SyntheticLayer> layers{
      {1e-4, 4000, 256}, {1e-4, 12000, 256}, {1e-4, 8000, 256}, {1e-4, 4000, 256}};
  const PlannerResult res = search_plans(linear_costs(layers), r);
  REQUIRE(!res.ranked.empty());
  PlannerRequest free_epilogue = r;
  free_epilogue.overheads = {};
  const PlannerResult without = search_plans(linear_costs(layers), free_epilogue);
  int checked = 0;
  for (const PlanCandidate& c : res.ranked) {
    CHECK(finite_and_positive(c));
    // Parameters per device of one replica, from the chosen layout.
    std::vector<int64_t> params;
    size_t l = 0;
    for (int n : c.layout) {
      int64_t sum = 0;
      for (int i = 0; i < n; ++i, ++l) sum += layers[l].param_bytes / 4;
      params.push_back(sum);
    }
    if (static_cast<int>(params.size()) != c.stages) continue;  // chunked: devices hold several
    const int64_t total = 7000, most = *std::max_element(params.begin(), params.end());
    CHECK(c.epilogue_s == doctest::Approx(1e-6 * total + 3e-6 * most).epsilon(1e-12));
    CHECK(c.step_s == doctest::Approx(c.pipeline_s + c.allreduce_s + c.epilogue_s));
    // The same plan without an epilogue: the same pipeline and all-reduce, epilogue_s shorter.
    const auto same =
        std::find_if(without.ranked.begin(), without.ranked.end(), [&](const auto& w) {
          return w.stages == c.stages && w.replicas == c.replicas &&
                 w.microbatches == c.microbatches && w.schedule == c.schedule &&
                 w.recompute.str() == c.recompute.str() && w.layout == c.layout;
        });
    REQUIRE(same != without.ranked.end());
    CHECK(same->epilogue_s == 0);
    CHECK(c.step_s - same->step_s == doctest::Approx(c.epilogue_s));
    ++checked;
  }
  CHECK(checked >= 4);
  // One replica on two stages pays 7000 params serially + its fuller device's update; two
  // replicas pay 7000 + 7000 per replica (each replica holds every layer).
  const auto dp = std::find_if(res.ranked.begin(), res.ranked.end(),
                               [](const PlanCandidate& c) { return c.replicas == 2; });
  REQUIRE(dp != res.ranked.end());
  CHECK(dp->epilogue_s == doctest::Approx(7000e-6 + 3 * 7000e-6));
}

TEST_CASE("planner: a tight memory cap forces recomputation, and the rejected are listed") {
  // Activations dominate: 1 MiB per sample per layer, tiny parameters. Two layers: on two
  // devices there is one split, so no other split could fit without recomputation.
  PlannerRequest r;
  r.devices = 2;
  r.batch = 16;
  std::vector<SyntheticLayer> layers(2, {1e-4, 1024, int64_t{1} << 20});
  const CostsFor costs = linear_costs(layers);
  const PlannerResult free = search_plans(costs, r);
  int64_t least_without_recompute = INT64_MAX;
  for (const PlanCandidate& c : free.ranked)
    if (c.recompute.kind == RecomputePolicy::Kind::never)
      least_without_recompute = std::min(least_without_recompute, c.max_peak_bytes());
  // No plan without recomputation fits under this cap.
  r.mem_cap_bytes = least_without_recompute - 1;
  const PlannerResult capped = search_plans(costs, r);
  REQUIRE(!capped.ranked.empty());
  for (const PlanCandidate& c : capped.ranked) {
    CHECK(c.max_peak_bytes() <= r.mem_cap_bytes);
    CHECK(c.recompute.kind != RecomputePolicy::Kind::never);
  }
  // The capped choice is the fastest of the uncapped list that fits under the cap.
  const auto fits = std::find_if(free.ranked.begin(), free.ranked.end(), [&](const auto& c) {
    return c.max_peak_bytes() <= r.mem_cap_bytes;
  });
  REQUIRE(fits != free.ranked.end());
  CHECK(capped.ranked.front().step_s <= fits->step_s);
  // Recomputation costs time: the uncapped best is faster.
  CHECK(free.ranked.front().step_s < capped.ranked.front().step_s);
  const bool listed = std::any_of(capped.rejected.begin(), capped.rejected.end(), [](auto& j) {
    return j.why == "over the memory cap" && j.count > 0;
  });
  CHECK(listed);
  CHECK(capped.report(5).find("over the memory cap") != std::string::npos);
}

TEST_CASE("planner: a cap nothing fits names the smallest cap that would") {
  PlannerRequest r;
  r.devices = 2;
  r.batch = 8;
  std::vector<SyntheticLayer> layers(4, {1e-4, 1 << 20, 1 << 16});
  const CostsFor costs = linear_costs(layers);
  const PlannerResult free = search_plans(costs, r);
  int64_t least = INT64_MAX;
  for (const PlanCandidate& c : free.ranked) least = std::min(least, c.max_peak_bytes());
  CHECK(free.smallest_fitting_cap == least);
  r.mem_cap_bytes = least / 2;
  const std::string want = fmt::format("the smallest cap any plan fits is {:.1f} MiB",
                                       static_cast<double>(least) / (1 << 20));
  CHECK_USAGE(search_plans(costs, r), want.c_str());
  r.mem_cap_bytes = least;  // exactly that cap: one plan at least
  const PlannerResult at = search_plans(costs, r);
  CHECK(!at.ranked.empty());
  CHECK(at.ranked.front().max_peak_bytes() <= least);
}

TEST_CASE("planner: a generator that refuses (D, M) is recorded with its reason") {
  PlannerRequest r;
  r.devices = 2;
  r.batch = 3;  // M in {1, 3}: dualpipev needs M >= 2D
  r.schedules = {"1f1b", "dualpipev"};
  const PlannerResult res =
      search_plans(linear_costs(std::vector<SyntheticLayer>(4, {1e-4, 64, 64})), r);
  const auto it = std::find_if(res.rejected.begin(), res.rejected.end(), [](auto& j) {
    return j.schedule == "dualpipev" && j.why == "generator refused";
  });
  REQUIRE(it != res.rejected.end());
  CHECK(it->count >= 2);  // M = 1 and M = 3, each for every recompute policy tried
  CHECK(it->example.find("4 or more micro-batches") != std::string::npos);
  // An odd batch cannot be split between two replicas.
  const bool batch = std::any_of(res.rejected.begin(), res.rejected.end(),
                                 [](auto& j) { return j.why == "batch not divisible by R"; });
  CHECK(batch);
  // Too many stages for the layers.
  r.schedules = {"interleaved:3"};
  r.batch = 4;
  const PlannerResult few =
      search_plans(linear_costs(std::vector<SyntheticLayer>(4, {1e-4, 64, 64})), r);
  const bool layers = std::any_of(few.rejected.begin(), few.rejected.end(),
                                  [](auto& j) { return j.why == "more stages than layers"; });
  CHECK(layers);
}

TEST_CASE("recompute cost: held inputs instead of activations, the forward again") {
  // Three layers, activations 100, 200, 300 bytes, outputs 10, 20, 30, forward 1, 2, 3 s.
  std::vector<LayerProfile> c(3);
  for (int l = 0; l < 3; ++l) {
    c[static_cast<size_t>(l)].forward_s = l + 1;
    c[static_cast<size_t>(l)].activation_bytes = 100 * (l + 1);
    c[static_cast<size_t>(l)].output_bytes = 10 * (l + 1);
    c[static_cast<size_t>(l)].param_bytes = 8;
  }
  const RecomputePolicy never{}, always{RecomputePolicy::Kind::always, 0},
      every1{RecomputePolicy::Kind::every, 1};
  // Params 16 B x (2 + 1 slot) = 48 for layers [1, 3).
  CHECK(stage_memory_bytes(c, 1, 3, 4, 1, never, false) == 48 + 4 * 500);
  // One segment [1, 3): holds layer 0's output (10) per micro-batch, rebuilds 500 once.
  CHECK(stage_memory_bytes(c, 1, 3, 4, 1, always, false) == 48 + 4 * 10 + 500);
  // Segments [1,2) and [2,3): hold 10 + 20, rebuild the larger (300) once.
  CHECK(stage_memory_bytes(c, 1, 3, 4, 1, every1, false) == 48 + 4 * 30 + 300);
  CHECK(recompute_time_s(c, 1, 3, always, false) == 5);
  CHECK(recompute_time_s(c, 1, 3, never, false) == 0);
  const RecomputePolicy except_last{RecomputePolicy::Kind::except_last, 0};
  CHECK(recompute_time_s(c, 1, 3, except_last, true) == 0);
}

TEST_CASE("--plan auto refuses the options it chooses itself") {
  TrainingOptions o;
  o.plan_auto = true;
  o.check(64);  // the defaults are fine
  TrainingOptions s = o;
  s.stages = 2;
  CHECK_USAGE(s.check(64), "--plan auto chooses --stages itself");
  TrainingOptions d = o;
  d.dp = 2;
  CHECK_USAGE(d.check(64), "--plan auto chooses --dp itself");
  TrainingOptions m = o;
  m.microbatches = 4;
  CHECK_USAGE(m.check(64), "--plan auto chooses --microbatches itself");
  TrainingOptions g = o;
  g.schedule = ScheduleChoice::parse("gpipe");
  CHECK_USAGE(g.check(64), "--plan auto chooses --schedule itself");
  TrainingOptions rc = o;
  rc.recompute = RecomputePolicy::parse("always");
  CHECK_USAGE(rc.check(64), "--plan auto chooses --recompute itself");
  TrainingOptions a = o;
  a.async_update = true;
  CHECK_USAGE(a.check(64), "--plan auto plans synchronous");
}
