// The memory model at the stated maxima of pipetrain-plan's inputs (a cost file's bytes 2^50 per
// layer and 2^20 layers, --batch 2^40, a cluster of 2^20 devices): byte counts saturate at
// kBytesBeyond instead of wrapping. A wrapped peak was negative (-8.5e9 GiB per device) and so
// fit every memory cap, --mem-cap 1 included (issue 37).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/partition/byte_count.h"
#include "engine/partition/cost_file.h"
#include "engine/partition/partitioner.h"
#include "engine/partition/stage_cost.h"
#include "engine/plan/planner.h"
#include "engine/plan/recompute_cost.h"
#include "schedule/generators.h"
#include "schedule/simulate.h"

using namespace pt;

namespace {

constexpr int64_t kMaxFieldBytes = int64_t{1} << 50;  // cost_file.h's stated maximum
constexpr int64_t kMaxBatch = int64_t{1} << 40;       // pipetrain-plan --batch's

// One table of one sample: every layer's fields at their maxima.
std::string maxima_cost_text(int layers) {
  std::string text = "samples 1\n";
  for (int l = 0; l < layers; ++l)
    text += "1e6 1e6 1e6 1125899906842624 1125899906842624 1125899906842624\n";
  return text;
}

}  // namespace

TEST_CASE("byte counts saturate instead of wrapping") {
  CHECK(add_bytes(kBytesBeyond, 1) == kBytesBeyond);
  CHECK(add_bytes(kBytesBeyond - 5, 10) == kBytesBeyond);
  CHECK(add_bytes(3, 4) == 7);
  CHECK(times_bytes(10, kMaxFieldBytes << 10) == kBytesBeyond);
  CHECK(times_bytes(3, 4) == 12);
  CHECK(bytes_from_double(1e30) == kBytesBeyond);
  CHECK(bytes_from_double(0x1p63) == kBytesBeyond);
  CHECK(bytes_from_double(12.4) == 12);
}

TEST_CASE("a cost file at its maxima, scaled to 2^40 samples, saturates") {
  const CostTables t = parse_cost_text(maxima_cost_text(2), "maxima.costs");
  // 2^50 bytes x 2^40 samples: llround of that was INT64_MIN.
  const std::vector<LayerProfile> big = t.for_samples(kMaxBatch);
  REQUIRE(big.size() == 2);
  CHECK(big[0].activation_bytes == kBytesBeyond);
  CHECK(big[0].output_bytes == kBytesBeyond);
  CHECK(big[0].param_bytes == kMaxFieldBytes);  // parameters do not scale
  CHECK(stage_memory_bytes(big, 0, 2, 1024, 8) == kBytesBeyond);
  CHECK(stage_memory_bytes(big, 0, 2, 1024, 8, RecomputePolicy{}, true) == kBytesBeyond);
}

TEST_CASE("2^20 layers at 2^50 bytes each: the stage sums saturate") {
  const std::vector<LayerProfile> layers(size_t{1} << 20, [] {
    LayerProfile p;
    p.activation_bytes = p.output_bytes = p.param_bytes = kMaxFieldBytes;
    return p;
  }());
  const int L = static_cast<int>(layers.size());
  CHECK(stage_param_bytes(layers, 0, L) == kBytesBeyond);
  CHECK(stage_activation_bytes(layers, 0, L) == kBytesBeyond);
  CHECK(stage_memory_bytes(layers, 0, L, 1, 0) == kBytesBeyond);
  CHECK(stage_memory_bytes(layers, 0, 4, 2, 1) == 3 * 4 * kMaxFieldBytes + 2 * 4 * kMaxFieldBytes);
  // The memory partition's prefix sums saturate past 2^13 layers; a later range is still exact.
  PartitionRequest pq;
  pq.method = {PartitionMethod::Kind::memory, {}};
  pq.stages = 2;
  pq.mem_cap_bytes = int64_t{1} << 40;  // below any one layer: nothing fits, and it says so
  pq.inflight_per_stage = {1, 1};
  std::vector<LayerProfile> few(layers.begin(), layers.begin() + 4);
  CHECK_THROWS_AS(partition(few, pq), UsageError);
}

TEST_CASE("a device's peak activations saturate") {
  const sched::Schedule s = sched::generate("gpipe", 2, 8);
  const auto peak = sched::peak_device_activation_bytes(s, {kBytesBeyond / 4, kBytesBeyond / 4});
  REQUIRE(peak.size() == 2);
  for (long long p : peak) CHECK(p == kBytesBeyond);
}

TEST_CASE("pipetrain-plan's maxima: 2^20 devices, --batch 2^40, nothing fits --mem-cap 1 MiB") {
  const CostTables t = parse_cost_text(maxima_cost_text(2), "maxima.costs");
  PlannerRequest r;
  r.devices = 1 << 20;
  r.batch = kMaxBatch;
  r.max_microbatches = 1024;
  r.simulate_top = 1;
  r.devices_per_node = 1 << 20;
  r.mem_cap_bytes = int64_t{1} << 20;
  const CostsFor costs = [&](int64_t mb) { return t.for_samples(mb); };
  // Before: a plan of peak -8,581,545,984 GiB per device was accepted under this cap.
  CHECK_THROWS_WITH_AS(search_plans(costs, r), doctest::Contains("no plan of the"), UsageError);
  r.mem_cap_bytes = 0;  // no cap: every plan's peak is a size, never negative
  const PlannerResult all = search_plans(costs, r);
  REQUIRE(!all.ranked.empty());
  for (const PlanCandidate& c : all.ranked) {
    CAPTURE(c.stages);
    CAPTURE(c.replicas);
    CHECK(c.max_peak_bytes() > kMaxFieldBytes);
    for (int64_t p : c.peak_bytes) CHECK(p >= 0);
  }
}
