// The memory accounting: the formula by hand on a tiny model, and how the schedule's number of
// micro-batches in flight (GPipe M, 1F1B S - s) changes it and what fits under a cap.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>

#include "engine/core/error.h"
#include "engine/partition/partitioner.h"
#include "engine/partition/stage_cost.h"
#include "helpers.h"
#include "layers/zoo.h"

using namespace pt;

TEST_CASE("peak memory of a stage, by hand") {
  // (3) -> linear(2) -> relu -> linear(2), micro-batch 5:
  //   linear 0: 3*2 + 2 = 8 params (32 B), saves x: 5 * 3 * 4 = 60 B
  //   relu 1:   no params,                 saves x: 5 * 2 * 4 = 40 B
  //   linear 2: 2*2 + 2 = 6 params (24 B), saves x: 5 * 2 * 4 = 40 B
  // AdamW (2 slots), 3 in flight: (2 + 2) * 56 + 3 * 140 = 224 + 420 = 644 bytes.
  const Model m = ModelBuilder({3}).linear(2).relu().linear(2).cross_entropy().build();
  const auto c = estimate_costs(m, 5);
  CHECK(c[0].param_bytes == 32);
  CHECK(c[0].activation_bytes == 60);
  CHECK(c[1].activation_bytes == 40);
  CHECK(c[2].activation_bytes == 40);
  PartitionRequest r;
  r.method = PartitionMethod::parse("uniform");
  r.stages = 1;
  r.optimizer_slots = 2;
  r.inflight_per_stage = {3};
  const Partition p = partition(m, c, r);
  CHECK(p.stages[0].params == 14);
  CHECK(p.stages[0].peak_memory_bytes == 644);

  // Two stages [0, 2) and [2, 3), SGD with momentum, in flight 2 and 1:
  //   stage 0: 3 * 32 + 2 * 100 = 296;  stage 1: 3 * 24 + 1 * 40 = 112.
  r.stages = 2;
  r.optimizer_slots = 1;
  r.inflight_per_stage = {2, 1};
  const Partition q = partition(m, c, r);
  CHECK(q.layout() == std::vector<int>{2, 1});
  CHECK(q.stages[0].peak_memory_bytes == 296);
  CHECK(q.stages[1].peak_memory_bytes == 112);
  // No inflight list: 1 each.
  r.inflight_per_stage.clear();
  CHECK(partition(m, c, r).stages[0].peak_memory_bytes == 3 * 32 + 100);
}

TEST_CASE("micro-batches in flight: GPipe M versus 1F1B S - s") {
  const Model m = deep_mlp(3, 64);  // 8 layers
  const auto c = estimate_costs(m, 16);
  const int S = 4, M = 8;
  PartitionRequest gpipe, one_f_one_b;
  gpipe.method = one_f_one_b.method = PartitionMethod::parse("uniform");
  gpipe.stages = one_f_one_b.stages = S;
  gpipe.inflight_per_stage.assign(S, M);
  for (int s = 0; s < S; ++s) one_f_one_b.inflight_per_stage.push_back(S - s);
  const Partition pg = partition(m, c, gpipe), pf = partition(m, c, one_f_one_b);
  for (int s = 0; s < S; ++s) {
    const StagePlan& g = pg.stages[static_cast<size_t>(s)];
    int64_t acts = 0;
    for (int l = g.first_layer; l < g.last_layer; ++l)
      acts += c[static_cast<size_t>(l)].activation_bytes;
    REQUIRE(acts > 0);
    CHECK(g.peak_memory_bytes - pf.stages[static_cast<size_t>(s)].peak_memory_bytes ==
          (M - (S - s)) * acts);
  }

  // Under the smallest cap 1F1B fits, GPipe (which holds more on every stage) fits no split.
  auto min_cap = [&](const std::vector<int>& inflight) {
    int64_t best = std::numeric_limits<int64_t>::max();
    test::for_each_split(m.num_layers(), S, [&](const std::vector<int>& b) {
      int64_t worst = 0;
      for (int s = 0; s < S; ++s)
        worst = std::max(
            worst, stage_memory_bytes(c, b[s], b[s + 1], inflight[static_cast<size_t>(s)], 1));
      best = std::min(best, worst);
    });
    return best;
  };
  const int64_t cap = min_cap(one_f_one_b.inflight_per_stage);
  REQUIRE(min_cap(gpipe.inflight_per_stage) > cap);
  gpipe.method = one_f_one_b.method = PartitionMethod::parse("memory");
  gpipe.mem_cap_bytes = one_f_one_b.mem_cap_bytes = cap;
  const Partition fit = partition(m, c, one_f_one_b);
  for (const StagePlan& s : fit.stages) CHECK(s.peak_memory_bytes <= cap);
  CHECK_THROWS_AS(partition(m, c, gpipe), UsageError);
}
