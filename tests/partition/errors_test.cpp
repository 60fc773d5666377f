// Every way a request can be wrong, and that each message carries the numbers and the fix;
// layout parsing; the table.
#include <doctest/doctest.h>

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/partition/partitioner.h"
#include "layers/zoo.h"

using namespace pt;

namespace {

Partition run(const Model& m, const std::string& method, int stages, int64_t cap = 0) {
  PartitionRequest r;
  r.method = PartitionMethod::parse(method);
  r.stages = stages;
  r.mem_cap_bytes = cap;
  return partition(m, estimate_costs(m, 4), r);
}

#define CHECK_USAGE(expr, text) CHECK_THROWS_WITH_AS(expr, doctest::Contains(text), UsageError)

}  // namespace

TEST_CASE("layout: explicit layer counts") {
  const Model m = deep_mlp(3, 8);  // 8 layers
  CHECK(parse_layout("3,3,2") == std::vector<int>{3, 3, 2});
  CHECK(parse_layout("8") == std::vector<int>{8});
  const Partition p = run(m, "layout:3,3,2", 3);
  CHECK(p.layout() == std::vector<int>{3, 3, 2});
  CHECK(p.stages[1].first_layer == 3);
  CHECK(p.stages[1].last_layer == 6);
  CHECK(p.method.str() == "layout:3,3,2");
  CHECK(p.method == PartitionMethod{PartitionMethod::Kind::layout, {3, 3, 2}});

  CHECK_USAGE(run(m, "layout:3,3,3", 3), "covers 9 layers but the model has 8");
  CHECK_USAGE(run(m, "layout:3,3,1", 3), "add up to 8");
  CHECK_USAGE(run(m, "layout:3,0,5", 3), "gives stage 1 0 layers");
  CHECK_USAGE(run(m, "layout:4,4", 3), "has 2 entries but there are 3 stages");
  CHECK_USAGE(run(m, "layout:3,x,5", 3), "'x' is not a number");
  CHECK_USAGE(run(m, "layout:3,,5", 3), "is not a comma-separated list");
  CHECK_USAGE(run(m, "layout:", 1), "is not a comma-separated list");
  CHECK_USAGE(run(m, "layout:3,3,2.5", 3), "'2.5' is not a number");
}

TEST_CASE("bad requests say what is wrong, with the numbers, and the fix") {
  const Model m = deep_mlp(2, 8);  // 6 layers
  REQUIRE(m.num_layers() == 6);
  CHECK_USAGE(run(m, "uniform", 0), "must be >= 1 but is 0");
  CHECK_USAGE(run(m, "uniform", -2), "use --stages >= 1");
  CHECK_USAGE(run(m, "uniform", 8), "cannot split 6 layers into 8 stages: use --stages <= 6");
  CHECK_USAGE(run(m, "time", 7), "cannot split 6 layers into 7 stages: use --stages <= 6");
  CHECK_USAGE(run(m, "fastest", 2), "unknown partition method 'fastest'");
  CHECK_USAGE(run(m, "fastest", 2), "uniform, params, time, memory, layout:");
  CHECK_USAGE(run(m, "memory", 2), "needs a memory cap");
  CHECK_USAGE(run(m, "uniform", 2, -5), "the memory cap is -5 bytes");

  PartitionRequest r;
  r.method = PartitionMethod::parse("uniform");
  r.stages = 3;
  r.inflight_per_stage = {1, 2};
  CHECK_USAGE(partition(m, estimate_costs(m, 4), r), "2 in-flight counts given for 3 stages");
  r.inflight_per_stage = {1, 0, 1};
  CHECK_USAGE(partition(m, estimate_costs(m, 4), r), "stage 1 keeps 0 micro-batches in flight");
  r.inflight_per_stage.clear();
  r.optimizer_slots = -1;
  CHECK_USAGE(partition(m, estimate_costs(m, 4), r), "optimizer_slots is -1");
  r.optimizer_slots = 1;
  CHECK_USAGE(partition(m, estimate_costs(deep_mlp(1, 8), 4), r),
              "the cost table has 4 entries but the model has 6 layers");
}

TEST_CASE("memory caps: none fits names the smallest cap; other methods are checked too") {
  const Model m = deep_mlp(2, 8);
  const auto c = estimate_costs(m, 4);
  PartitionRequest r;
  r.method = PartitionMethod::parse("memory");
  r.stages = 2;
  r.mem_cap_bytes = 100;
  // Parameters alone: 784*8+8 = 6,280 (layer 1), 8*8+8 = 72 (layer 3), 8*10+10 = 90 (layer 5).
  // The best 2-split keeps layer 1 alone-ish: stage 0 needs at least 3 * 6280 * 4 bytes.
  CHECK_USAGE(partition(m, c, r),
              "no split of 6 layers into 2 stages fits the memory cap of 0.0 MiB (100 bytes)");
  CHECK_USAGE(partition(m, c, r), "the smallest cap any split fits is");
  CHECK_USAGE(partition(m, c, r), "raise the cap");

  r.method = PartitionMethod::parse("uniform");
  r.mem_cap_bytes = 100;
  CHECK_USAGE(partition(m, c, r), "over the memory cap of 0.0 MiB (100 bytes)");
  CHECK_USAGE(partition(m, c, r), "use method 'memory'");
  r.mem_cap_bytes = int64_t{1} << 40;  // plenty: every method passes
  for (const char* method : {"uniform", "params", "time", "memory", "layout:1,5"}) {
    r.method = PartitionMethod::parse(method);
    CHECK_NOTHROW(partition(m, c, r));
  }
}

TEST_CASE("table: a header and one row per stage") {
  const Model m = deep_mlp(3, 8);
  const Partition p = run(m, "time", 3);
  const std::string t = p.table();
  CHECK(t.find("partition 'time': 3 stages") != std::string::npos);
  for (const StagePlan& s : p.stages) {
    const std::string range = fmt::format("[{}, {})", s.first_layer, s.last_layer);
    CHECK_MESSAGE(t.find(range) != std::string::npos, t);
    CHECK(t.find(std::to_string(s.params)) != std::string::npos);
  }
  CHECK(std::count(t.begin(), t.end(), '\n') == 2 + 3);
}
