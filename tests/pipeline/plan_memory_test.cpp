// The plan's memory per device: every stage a device holds (interleaved, V shapes), with the
// activations its schedule's own list holds at once; the --mem-cap check per device; and the
// V shapes' memory against 1F1B on the same layers.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "engine/core/error.h"
#include "engine/partition/stage_cost.h"
#include "engine/plan/plan.h"
#include "layers/builder.h"
#include "layers/zoo.h"

using namespace pt;

namespace {

PlanRequest request(const std::string& schedule, int D, int M, int64_t cap = 0) {
  PlanRequest r;
  r.devices = D;
  r.microbatches = M;
  r.batch = 128 * M;  // micro-batches of 128: activations, not parameters, dominate memory
  r.schedule = ScheduleChoice::parse(schedule);
  r.partition = PartitionMethod::parse("uniform");
  r.mem_cap_bytes = cap;
  return r;
}

int64_t max_of(const std::vector<int64_t>& v) { return *std::max_element(v.begin(), v.end()); }

}  // namespace

TEST_CASE("plan memory: one stage per device is the partitioner's stage peak") {
  const Model m = deep_mlp(5, 64, {1, 6, 6});  // 12 layers
  REQUIRE(m.num_layers() == 12);
  for (const std::string s : {"gpipe", "1f1b", "zb-h1"}) {
    CAPTURE(s);
    const PipelinePlan p = make_plan(m, request(s, 3, 6));
    REQUIRE(p.device_peak_memory_bytes.size() == 3);
    for (size_t d = 0; d < 3; ++d)
      CHECK(p.device_peak_memory_bytes[d] == p.partition.stages[d].peak_memory_bytes);
  }
}

TEST_CASE("plan memory: a V device, by hand") {
  // (3) -> linear(2) -> relu -> linear(2), micro-batch 5 (tests/partition/memory_test.cpp):
  // stage 0 = layers [0, 2): 32 B params, saves 100 B; stage 1 = [2, 3): 24 B, saves 40 B. SGD
  // momentum: 3 x params = 96 + 72 = 168 B. zbv(1, 2) runs on its one device
  //   0F0 1F0 1I0 0I0 1W0 0F1 0W0 1F1 1I1 0I1 1W1 0W1
  // holding 100, 140, 140, 140, 100, 200 (0F1 before 0W0), ...: 200 B at most, 368 B in all.
  // The stages alone peak at 2 x 100 and 1 x 40: their sum (408 B) would overstate it by 40.
  const Model m = ModelBuilder({3}).linear(2).relu().linear(2).cross_entropy().build();
  PlanRequest r = request("zbv", 1, 2);
  r.batch = 10;
  const PipelinePlan p = make_plan(m, r);
  REQUIRE(p.partition.layout() == std::vector<int>{2, 1});
  CHECK(p.simulated.peak_inflight == std::vector<int>{2, 1});
  CHECK(p.partition.stages[0].peak_memory_bytes == 296);
  CHECK(p.partition.stages[1].peak_memory_bytes == 112);
  CHECK(p.device_peak_memory_bytes == std::vector<int64_t>{368});
  r.mem_cap_bytes = 368;
  CHECK(make_plan(m, r).device_peak_memory_bytes == std::vector<int64_t>{368});
  r.mem_cap_bytes = 367;  // every stage fits (296, 112), the device does not
  CHECK_THROWS_WITH_AS(make_plan(m, r), doctest::Contains("makes device 0"), UsageError);
}

TEST_CASE("plan memory: a V device holds two stages, at most the sum of their peaks") {
  const Model m = deep_mlp(5, 64, {1, 6, 6});  // 12 layers
  const int D = 3;
  for (const std::string s : {"zbv", "v-half", "v-min"}) {
    CAPTURE(s);
    const PipelinePlan p = make_plan(m, request(s, D, 12));
    REQUIRE(p.partition.stages.size() == 2 * D);
    bool below_sum = false;
    for (int d = 0; d < D; ++d) {
      CAPTURE(d);
      const StagePlan& a = p.partition.stages[static_cast<size_t>(d)];
      const StagePlan& b = p.partition.stages[static_cast<size_t>(2 * D - 1 - d)];
      const int64_t peak = p.device_peak_memory_bytes[static_cast<size_t>(d)];
      CHECK(peak <= a.peak_memory_bytes + b.peak_memory_bytes);
      CHECK(peak >= std::max(a.peak_memory_bytes, b.peak_memory_bytes));
      below_sum = below_sum || peak < a.peak_memory_bytes + b.peak_memory_bytes;
    }
    // zbv's chunks do not peak at the same point of the list; v-half and v-min run at their
    // limit, where the sum is what the device holds.
    if (s == "zbv") CHECK(below_sum);
    CHECK(p.report().find("predicted peak memory per device:") != std::string::npos);
  }
}

TEST_CASE("plan memory: v-min and v-half hold less than zbv and 1f1b; --mem-cap per device") {
  // 32 layers: 2 per V chunk, 4 per 1F1B stage. At D = 8 the V shapes' limits are 11 and 9 chunk
  // activations against 1F1B's 16 (at D = 4, 7 and 5 against 8: v-half saves nothing in bytes
  // there, 1F1B's device 0 holding the narrow first layers).
  const Model m = deep_mlp(15, 64, {1, 6, 6});
  const int D = 8, M = 32;
  const int64_t one = max_of(make_plan(m, request("1f1b", D, M)).device_peak_memory_bytes);
  const int64_t zero = max_of(make_plan(m, request("zbv", D, M)).device_peak_memory_bytes);
  const int64_t half = max_of(make_plan(m, request("v-half", D, M)).device_peak_memory_bytes);
  const int64_t min = max_of(make_plan(m, request("v-min", D, M)).device_peak_memory_bytes);
  CHECK(min < half);
  CHECK(half < zero);
  CHECK(half < one);
  CHECK(one < zero);  // as many activations as 1F1B's device 0, but of wider layers
  // A cap v-min fits and v-half does not.
  CHECK(make_plan(m, request("v-min", D, M, min)).device_peak_memory_bytes.size() ==
        static_cast<size_t>(D));
  CHECK_THROWS_AS(make_plan(m, request("v-half", D, M, min)), UsageError);
  // Each stage of zbv fits a cap just under its device's peak; the device does not: refused
  // per device, with its need and the fix.
  CHECK_THROWS_WITH_AS(make_plan(m, request("zbv", D, M, zero - 1)),
                       doctest::Contains("makes device"), UsageError);
  CHECK_THROWS_WITH_AS(make_plan(m, request("zbv", D, M, zero - 1)),
                       doctest::Contains("raise --mem-cap to at least"), UsageError);
}

TEST_CASE("plan: a V schedule with fewer layers than 2D chunks is refused with what fits") {
  const Model m = deep_mlp(1, 16, {1, 6, 6});  // 4 layers
  CHECK_THROWS_WITH_AS(make_plan(m, request("zbv", 3, 4)),
                       doctest::Contains("cannot split 4 layers into 6 stages (3 devices x 2 "
                                         "chunks): use --stages <= 2"),
                       UsageError);
  CHECK(make_plan(m, request("v-min", 2, 4)).partition.stages.size() == 4);
}
