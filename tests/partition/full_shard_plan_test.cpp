// Full sharding in the planner (engine/plan/full_shard.h, planner.h): memory and collectives by
// hand, the choice it makes where only sharding fits, and the direction of the crossover
// between full sharding and a pipeline on synthetic costs whose answer is known by construction.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/plan/full_shard.h"
#include "engine/plan/planner.h"

using namespace pt;

namespace {

// Per-sample costs scaled by the micro-batch size, as compute and activations scale.
struct SyntheticLayer {
  double seconds_per_sample;  // each of F, I and W
  int64_t param_bytes;
  int64_t activation_bytes_per_sample;
};

CostsFor costs_of(std::vector<SyntheticLayer> layers) {
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

// The fastest ranked candidate matching `want`, or nullptr.
template <typename Want>
const PlanCandidate* best_where(const PlannerResult& res, Want want) {
  const auto it = std::find_if(res.ranked.begin(), res.ranked.end(), want);
  return it == res.ranked.end() ? nullptr : &*it;
}

bool is_full(const PlanCandidate& c) { return c.shard == ShardChoice::full; }

constexpr int64_t MiB = int64_t{1} << 20;

}  // namespace

TEST_CASE("full shard: a device holds 1/R of parameters, gradients and optimizer state") {
  // One stage on each of R replicas, M = 1: AdamW's (2 + 2) x 20480 bytes become 1/R each, plus
  // the largest unit (8192 bytes) gathered with its whole gradient, plus the activations as
  // without sharding (1F1B on one device: one micro-batch in flight, 4 x 512 bytes). Without
  // prefetch, so that every collective is on the critical path.
  const std::vector<SyntheticLayer> layers{
      {1e-4, 4096, 512}, {1e-4, 8192, 512}, {1e-4, 4096, 512}, {1e-4, 4096, 512}};
  for (const int R : {2, 4}) {
    CAPTURE(R);
    PlannerRequest r;
    r.devices = R;
    r.batch = R;  // one sample per replica: M = 1
    r.optimizer_slots = 2;
    r.schedules = {"1f1b"};
    r.recompute = {{RecomputePolicy::Kind::never, 0}};
    r.stages = {1};
    r.shard = {ShardChoice::none, ShardChoice::full};
    r.allreduce_bytes_per_second = 1e9;
    r.allreduce_latency_s = 1e-6;
    r.shard_prefetch = false;
    const PlannerResult res = search_plans(costs_of(layers), r);
    const PlanCandidate* full = best_where(res, is_full);
    const PlanCandidate* whole =
        best_where(res, [](const PlanCandidate& c) { return !is_full(c); });
    REQUIRE(full != nullptr);
    REQUIRE(whole != nullptr);
    CHECK(full->replicas == R);
    CHECK(full->microbatches == 1);
    const int64_t activations = 4 * 512;
    CHECK(whole->max_peak_bytes() == 4 * 20480 + activations);
    CHECK(full->max_peak_bytes() == 4 * 20480 / R + 2 * 8192 + activations);
    // The sharded parts are exactly 1/R of what the whole replica holds.
    CHECK((full->max_peak_bytes() - 2 * 8192 - activations) * R ==
          whole->max_peak_bytes() - activations);
    // Collectives, each a ring over R of the layer's bytes: (R - 1) / R x n / 1 GB/s + (R - 1)
    // x 1 us. Two gathers per layer and micro-batch (F, B), one reduce-scatter per layer and step.
    double ring = 0;
    for (const SyntheticLayer& l : layers)
      ring += (R - 1.0) / R * static_cast<double>(l.param_bytes) / 1e9 + (R - 1) * 1e-6;
    CHECK(full->gather_s == doctest::Approx(2 * ring));
    CHECK(full->allreduce_s == doctest::Approx(ring));
    // Exposed: on the critical path of the one device.
    CHECK(full->pipeline_s == doctest::Approx(whole->pipeline_s + 2 * ring));
    CHECK(res.report(5).find("shard") != std::string::npos);
    // With prefetch the next unit is gathered while one computes, and the last unit's gradient
    // is still being reduce-scattered while the next one's is computed: one unit more of each.
    r.shard_prefetch = true;
    const PlannerResult ahead = search_plans(costs_of(layers), r);
    const PlanCandidate* prefetched = best_where(ahead, is_full);
    REQUIRE(prefetched != nullptr);
    CHECK(prefetched->max_peak_bytes() == 4 * 20480 / R + 4 * 8192 + activations);
  }
}

TEST_CASE("full shard: with M > 1 the whole gradients live until the reduce-scatter") {
  // The runtime sums a unit's gradients over the step's micro-batches before reduce-scattering
  // them (unit_shards.h): with M = 2 every unit's whole gradient (20480 bytes) is held, and the
  // gathered unit's own gradient is no longer extra.
  PlannerRequest r;
  r.devices = 2;
  r.batch = 4;
  r.max_microbatches = 2;
  r.optimizer_slots = 2;
  r.schedules = {"1f1b"};
  r.recompute = {{RecomputePolicy::Kind::never, 0}};
  r.stages = {1};
  r.shard = {ShardChoice::full};
  r.shard_prefetch = false;
  const PlannerResult res = search_plans(
      costs_of({{1e-4, 4096, 512}, {1e-4, 8192, 512}, {1e-4, 4096, 512}, {1e-4, 4096, 512}}), r);
  const PlanCandidate* m2 =
      best_where(res, [](const PlanCandidate& c) { return c.microbatches == 2; });
  const PlanCandidate* m1 =
      best_where(res, [](const PlanCandidate& c) { return c.microbatches == 1; });
  REQUIRE(m1 != nullptr);
  REQUIRE(m2 != nullptr);
  CHECK(m1->max_peak_bytes() == 4 * 20480 / 2 + 2 * 8192 + 2 * 4 * 512);  // 2 samples
  CHECK(m2->max_peak_bytes() == 4 * 20480 / 2 + 20480 + 8192 + 4 * 512);  // 1 sample
  // Gathers are per micro-batch: twice as many at M = 2.
  CHECK(m2->gather_s == doctest::Approx(2 * m1->gather_s));
  // Nothing but full sharding was asked for: R = 1 is rejected with the reason.
  CHECK(std::all_of(res.ranked.begin(), res.ranked.end(), is_full));
}

TEST_CASE("full shard: gathered bytes: the largest unit, or the largest recomputed segment") {
  std::vector<LayerProfile> layers(4);
  for (size_t l = 0; l < layers.size(); ++l) layers[l].param_bytes = l == 1 ? 8 : 4;
  const std::vector<std::pair<int, int>> whole{{0, 4}};
  const auto buffer = [&](const char* policy, int M, bool prefetch = false) {
    return full_shard_gather_buffer_bytes(layers, whole, RecomputePolicy::parse(policy), M,
                                          prefetch);
  };
  CHECK(buffer("never", 2) == 8);
  CHECK(buffer("never", 1) == 16);        // and its whole gradient
  CHECK(buffer("every:1", 1) == 16);      // a segment is one unit
  CHECK(buffer("every:2", 2) == 12);      // layers 0-1 recomputed together: both gathered
  CHECK(buffer("always", 2) == 20);       // the stage is one segment
  CHECK(buffer("always", 1) == 28);       // + the largest unit's gradient
  CHECK(buffer("except_last", 2) == 8);   // this is the last stage: not recomputed
  CHECK(buffer("never", 2, true) == 16);  // the next unit's gather
  CHECK(buffer("never", 1, true) == 32);  // and the last unit's reduce-scatter
  CHECK(buffer("always", 2, true) == 28);
}

TEST_CASE(
    "full shard: recomputation reuses the backward's gather; a split backward gathers for W") {
  // The executor gathers a recomputed segment's units for the recomputation and keeps them for
  // their backward (2 gathers per layer and micro-batch, as without recomputation); zero-bubble
  // schedules release after I and gather again for W (3). One device per replica, without
  // prefetch: the step grows by exactly the gathers.
  const std::vector<SyntheticLayer> layers(4, {1e-4, 1 << 20, 512});
  const auto added = [&](const char* schedule, const char* policy) {
    PlannerRequest r;
    r.devices = 2;
    r.batch = 8;
    r.max_microbatches = 4;
    r.schedules = {schedule};
    r.recompute = {RecomputePolicy::parse(policy)};
    r.stages = {1};
    r.shard = {ShardChoice::none, ShardChoice::full};
    r.shard_prefetch = false;
    const PlannerResult res = search_plans(costs_of(layers), r);
    const auto at_m4 = [&](bool full) {
      const PlanCandidate* c = best_where(res, [full](const PlanCandidate& p) {
        return p.microbatches == 4 && is_full(p) == full;
      });
      REQUIRE(c != nullptr);
      return c;
    };
    const PlanCandidate* full = at_m4(true);
    CHECK(full->pipeline_s - at_m4(false)->pipeline_s == doctest::Approx(full->gather_s));
    return full->gather_s;
  };
  const double plain = added("1f1b", "never");
  // 4 layers, 4 micro-batches, 2 gathers each of 1 MiB among 2 at 10 GB/s + 20 us.
  CHECK(plain == doctest::Approx(4 * 4 * 2 * (0.5 * MiB / 10e9 + 20e-6)));
  CHECK(added("1f1b", "every:1") == doctest::Approx(plain));
  CHECK(added("1f1b", "always") == doctest::Approx(plain));
  CHECK(added("zb-h1", "never") == doctest::Approx(1.5 * plain));
}

TEST_CASE("full shard: a model that fits only when sharded is planned sharded") {
  // Four layers of 1 MiB; AdamW: 16 MiB whole. Two replicas fully sharded hold 8 MiB of parts
  // and, with prefetch, 4 MiB of whole units (M = 1; M > 1: 4 MiB of summed gradients + 2); a cap
  // of 15 MiB turns away every unsharded replica of the whole model.
  PlannerRequest r;
  r.devices = 2;
  r.batch = 64;
  r.optimizer_slots = 2;
  r.mem_cap_bytes = 15 * MiB;
  r.schedules = {"1f1b"};
  r.recompute = {{RecomputePolicy::Kind::never, 0}};
  r.shard = {ShardChoice::none, ShardChoice::full};
  r.allreduce_bytes_per_second = 100e9;

  SUBCASE("pipelines left out") {
    r.stages = {1};
    const PlannerResult res =
        search_plans(costs_of(std::vector<SyntheticLayer>(4, {1e-4, MiB, 256})), r);
    REQUIRE(!res.ranked.empty());
    CHECK(std::all_of(res.ranked.begin(), res.ranked.end(), is_full));
    CHECK(res.ranked.front().replicas == 2);
    CHECK(std::any_of(res.rejected.begin(), res.rejected.end(), [](const PlanRejection& j) {
      return j.why.find("over the memory cap") != std::string::npos &&
             j.example.find("S x R = 1 x 2, M") != std::string::npos;
    }));
    CHECK(res.report(3).find("full") != std::string::npos);
  }
  SUBCASE("pipelines fit but are too slow") {
    // SyntheticLayer 0 is 100x any other: a 2-stage pipeline holds it on one device for all 64
    // samples, two sharded replicas split it (as the planner's first test shows for plain
    // replicas).
    const PlannerResult res = search_plans(
        costs_of({{1e-3, MiB, 256}, {1e-5, MiB, 256}, {1e-5, MiB, 256}, {1e-5, MiB, 256}}), r);
    REQUIRE(!res.ranked.empty());
    const PlanCandidate& best = res.ranked.front();
    CHECK(best.shard == ShardChoice::full);
    CHECK(best.stages == 1);
    CHECK(best.replicas == 2);
    CHECK(best.max_peak_bytes() <= r.mem_cap_bytes);
    const PlanCandidate* pipe =
        best_where(res, [](const PlanCandidate& c) { return c.stages == 2 && !is_full(c); });
    REQUIRE(pipe != nullptr);  // it fits: it is only slower
    CHECK(pipe->step_s > 1.8 * best.step_s);
    CHECK(best_where(res, [](const PlanCandidate& c) { return c.stages == 1 && !is_full(c); }) ==
          nullptr);
  }
  SUBCASE("the default (as --plan auto) never shards: nothing fits") {
    r.shard.clear();
    r.stages = {1};
    CHECK_THROWS_AS(search_plans(costs_of(std::vector<SyntheticLayer>(4, {1e-4, MiB, 256})), r),
                    UsageError);
  }
}

TEST_CASE(
    "full shard: the crossover moves to the pipeline with a slower link, more bytes per "
    "FLOP, fewer samples per device") {
  // Eight equal layers on 4 devices in 2 nodes of 2: full sharding over R = 4 (S = 1) or a
  // 4-stage pipeline (R = 1); a cap that no unsharded replica of the whole model fits. Full
  // sharding pays 2 gathers per layer and micro-batch and a reduce-scatter, over the inter-node
  // link (its 4 replicas span both nodes): all of it without prefetch, with prefetch what the
  // layers' compute does not hide; the pipeline pays its fill and drain (1F1B, (S - 1) /
  // (M + S - 1) of the step, M <= 8).
  struct Case {
    double inter_node_bytes_per_second;
    int64_t param_bytes;  // per layer
    int64_t batch;
  };
  const auto winner = [](const Case& k, bool prefetch) {
    PlannerRequest r;
    r.devices = 4;
    r.devices_per_node = 2;
    r.batch = k.batch;
    r.max_microbatches = 8;
    r.optimizer_slots = 2;
    r.mem_cap_bytes = 25 * k.param_bytes;  // whole: 8 x 4 = 32 per-layer parameter bytes
    r.schedules = {"1f1b"};
    r.recompute = {{RecomputePolicy::Kind::never, 0}};
    r.stages = {1, 4};
    r.shard = {ShardChoice::none, ShardChoice::full};
    r.shard_prefetch = prefetch;
    r.transfer_bytes_per_second = r.allreduce_bytes_per_second = 300e9;
    r.inter_node = {k.inter_node_bytes_per_second, 1e-6};
    const PlannerResult res =
        search_plans(costs_of(std::vector<SyntheticLayer>(8, {1e-4, k.param_bytes, 1024})), r);
    REQUIRE(!res.ranked.empty());
    const PlanCandidate& best = res.ranked.front();
    CAPTURE(res.report(6));
    // Only these two shapes can win: the cap turns away S = 1 unsharded.
    CHECK(((best.stages == 1 && best.replicas == 4 && is_full(best)) ||
           (best.stages == 4 && best.replicas == 1)));
    return std::string(best.stages == 1 ? "full sharding" : "pipeline");
  };
  const int64_t p = 16 * MiB;
  SUBCASE("without prefetch") {
    CHECK(winner({1e12, p, 32}, false) == "full sharding");
    // The gathers and the reduce-scatter over a 10 GB/s link outweigh the bubble.
    CHECK(winner({10e9, p, 32}, false) == "pipeline");
    // 64x the parameter bytes at the same compute: 64x the traffic, the same bubble.
    CHECK(winner({1e12, 64 * p, 32}, false) == "pipeline");
    // A 100 GB/s link: full sharding still wins at 8 samples per device, not at 2 (Table 1's
    // weak scaling: the traffic is per step, the compute per sample).
    CHECK(winner({100e9, p, 32}, false) == "full sharding");
    CHECK(winner({100e9, p, 8}, false) == "pipeline");
  }
  SUBCASE("with prefetch: the same, once the gathers outgrow the compute that hides them") {
    CHECK(winner({1e12, p, 32}, true) == "full sharding");
    CHECK(winner({10e9, p, 32}, true) == "pipeline");
    CHECK(winner({1e12, 64 * p, 32}, true) == "full sharding");  // still hidden
    CHECK(winner({1e12, 256 * p, 32}, true) == "pipeline");
    CHECK(winner({25e9, p, 32}, true) == "full sharding");
    CHECK(winner({25e9, p, 8}, true) == "pipeline");
  }
}

TEST_CASE("full shard: a gather waited for is added; prefetched, only its excess over compute") {
  // One layer of 8e9 bytes among R = 2 over a 1 GB/s link: each gather 4 s.
  std::vector<LayerProfile> one(1);
  one[0].forward_s = 3;
  one[0].backward_input_s = one[0].backward_weight_s = 2;
  one[0].param_bytes = 8'000'000'000;
  const Link link{1e9, 0};
  REQUIRE(ring_allgather_s(8e9, 2, link) == doctest::Approx(4));
  const LayerProfile exposed = with_full_shard_gathers(one, 2, 1, link, false, false)[0];
  CHECK(exposed.forward_s == doctest::Approx(7));
  CHECK(exposed.backward_input_s == doctest::Approx(6));
  CHECK(exposed.backward_weight_s == doctest::Approx(2));
  CHECK(exposed.forward_gather_s == doctest::Approx(4));
  CHECK(with_full_shard_gathers(one, 2, 1, link, false, true)[0].backward_weight_s ==
        doctest::Approx(6));
  // Prefetched: the forward waits 4 - 3; the backward's link carries the gather and, at M = 1,
  // the whole reduce-scatter: 8 s against 4 s of compute. At M = 4, 5 s against 4.
  const LayerProfile m1 = with_full_shard_gathers(one, 2, 1, link, true, false)[0];
  CHECK(m1.forward_s == doctest::Approx(4));
  CHECK(m1.forward_gather_s == doctest::Approx(1));
  CHECK(m1.backward_input_s + m1.backward_weight_s == doctest::Approx(8));
  const LayerProfile m4 = with_full_shard_gathers(one, 2, 4, link, true, false)[0];
  CHECK(m4.backward_input_s + m4.backward_weight_s == doctest::Approx(5));
  // A layer whose compute covers its gathers costs nothing more.
  one[0].param_bytes = 2'000'000'000;
  const LayerProfile hidden = with_full_shard_gathers(one, 2, 4, link, true, false)[0];
  CHECK(hidden.forward_s == 3);
  CHECK(hidden.backward_input_s == 2);
  CHECK(hidden.forward_gather_s == 0);
}
