// The searches: uniform counts, parameter balancing against a hand-computed optimum, and the
// time and memory-capped dynamic programmes against brute force over every split.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/partition/min_max_split.h"
#include "engine/partition/partitioner.h"
#include "engine/partition/stage_cost.h"
#include "helpers.h"
#include "layers/zoo.h"

using namespace pt;

namespace {

Partition run(const Model& m, const std::vector<LayerProfile>& c, const std::string& method,
              int stages) {
  PartitionRequest r;
  r.method = PartitionMethod::parse(method);
  r.stages = stages;
  return partition(m, c, r);
}

void check_covers(const Partition& p, int L, int S) {
  REQUIRE(p.stages.size() == static_cast<size_t>(S));
  CHECK(p.stages.front().first_layer == 0);
  CHECK(p.stages.back().last_layer == L);
  for (size_t s = 0; s < p.stages.size(); ++s) {
    CHECK(p.stages[s].last_layer > p.stages[s].first_layer);
    if (s > 0) CHECK(p.stages[s].first_layer == p.stages[s - 1].last_layer);
  }
}

}  // namespace

TEST_CASE("uniform: counts differ by at most one, earlier stages get the extra") {
  const Model m = deep_mlp(4, 8);  // 10 layers
  REQUIRE(m.num_layers() == 10);
  const auto c = estimate_costs(m, 4);
  CHECK(run(m, c, "uniform", 3).layout() == std::vector<int>{4, 3, 3});
  CHECK(run(m, c, "uniform", 4).layout() == std::vector<int>{3, 3, 2, 2});
  CHECK(run(m, c, "uniform", 5).layout() == std::vector<int>{2, 2, 2, 2, 2});
  CHECK(run(m, c, "uniform", 1).layout() == std::vector<int>{10});
  CHECK(run(m, c, "uniform", 10).layout() == std::vector<int>(10, 1));
  check_covers(run(m, c, "uniform", 3), 10, 3);
}

TEST_CASE("params: fashion_mlp balanced against the hand-computed optimum") {
  // Layers: 0 flatten, 1 L(784->1024) 803,840, 2 relu, 3 L(1024->1024) 1,049,600, 4 relu,
  // 5 L 1,049,600, 6 relu, 7 L 1,049,600, 8 relu, 9 L(1024->10) 10,250.
  const Model m = fashion_mlp();
  const auto c = estimate_costs(m, 32);
  auto params_of = [](const Partition& p) {
    std::vector<int64_t> v;
    for (const auto& s : p.stages) v.push_back(s.params);
    return v;
  };
  SUBCASE("2 stages: {L1, L2} | {L3, L4, L5}, largest 2,109,450") {
    // The alternative {L1, L2, L3} | {L4, L5} has 2,903,040 on stage 0.
    const Partition p = run(m, c, "params", 2);
    check_covers(p, 10, 2);
    CHECK(params_of(p) == std::vector<int64_t>{1853440, 2109450});
    CHECK(p.layout() == std::vector<int>{4, 6});  // ties (where a relu goes): earliest cut
  }
  SUBCASE("3 stages: {L1, L2} | {L3} | {L4, L5}, largest 1,853,440") {
    // Every other grouping is worse: {L1}{L2,L3}{L4,L5} 2,099,200; {L1}{L2}{L3,L4,L5}
    // 2,109,450; {L1,L2}{L3,L4}{L5} 2,099,200.
    const Partition p = run(m, c, "params", 3);
    check_covers(p, 10, 3);
    CHECK(params_of(p) == std::vector<int64_t>{1853440, 1049600, 1059850});
    CHECK(p.layout() == std::vector<int>{4, 2, 4});
  }
}

TEST_CASE("time: the DP finds the brute-force optimum on random costs") {
  CounterRng rng(42);
  int cases = 0;
  for (int trial = 0; trial < 60; ++trial) {
    for (int L = 1; L <= 10; ++L) {
      const Model m = test::chain(L);
      const auto c = test::random_costs(L, rng);
      for (int S = 1; S <= std::min(4, L); ++S) {
        double best = std::numeric_limits<double>::infinity();
        test::for_each_split(L, S, [&](const std::vector<int>& b) {
          double worst = 0;
          for (int s = 0; s < S; ++s) worst = std::max(worst, stage_time_s(c, b[s], b[s + 1]));
          best = std::min(best, worst);
        });
        const Partition p = run(m, c, "time", S);
        check_covers(p, L, S);
        CHECK(p.max_stage_time() == best);                   // same in-order sums: exactly equal
        CHECK(run(m, c, "time", S).layout() == p.layout());  // reproducible
        ++cases;
      }
    }
  }
  CHECK(cases == 60 * (1 + 2 + 3 + 4 * 7));
}

TEST_CASE("memory: the capped DP finds the brute-force optimum, or names the smallest cap") {
  CounterRng rng(7);
  int feasible = 0, infeasible = 0;
  for (int trial = 0; trial < 40; ++trial) {
    for (int L = 1; L <= 10; ++L) {
      const Model m = test::chain(L);
      const auto c = test::random_costs(L, rng);
      for (int S = 1; S <= std::min(4, L); ++S) {
        PartitionRequest r;
        r.method = PartitionMethod::parse("memory");
        r.stages = S;
        r.optimizer_slots = static_cast<int>(rng.next_below(3));
        for (int s = 0; s < S; ++s)
          r.inflight_per_stage.push_back(1 + static_cast<int>(rng.next_below(4)));
        auto mem = [&](int s, int a, int b) {
          return stage_memory_bytes(c, a, b, r.inflight_per_stage[static_cast<size_t>(s)],
                                    r.optimizer_slots);
        };
        // The smallest cap any split fits, and a cap around it (sometimes below: infeasible).
        int64_t min_cap = std::numeric_limits<int64_t>::max();
        test::for_each_split(L, S, [&](const std::vector<int>& b) {
          int64_t worst = 0;
          for (int s = 0; s < S; ++s) worst = std::max(worst, mem(s, b[s], b[s + 1]));
          min_cap = std::min(min_cap, worst);
        });
        r.mem_cap_bytes =
            std::max<int64_t>(1, min_cap - 1024 + static_cast<int64_t>(rng.next_below(8192)));

        double best = std::numeric_limits<double>::infinity();
        test::for_each_split(L, S, [&](const std::vector<int>& b) {
          double worst = 0;
          for (int s = 0; s < S; ++s) {
            if (mem(s, b[s], b[s + 1]) > r.mem_cap_bytes) return;
            worst = std::max(worst, stage_time_s(c, b[s], b[s + 1]));
          }
          best = std::min(best, worst);
        });
        if (r.mem_cap_bytes >= min_cap) {
          const Partition p = partition(m, c, r);
          check_covers(p, L, S);
          CHECK(p.max_stage_time() == best);
          for (const StagePlan& sp : p.stages) CHECK(sp.peak_memory_bytes <= r.mem_cap_bytes);
          ++feasible;
        } else {
          CHECK(best == std::numeric_limits<double>::infinity());
          const std::string expected =
              fmt::format("any split fits is {:.1f} MiB ({} bytes)",
                          static_cast<double>(min_cap) / (1 << 20), min_cap);
          CHECK_THROWS_WITH_AS(partition(m, c, r), doctest::Contains(expected.c_str()), UsageError);
          ++infeasible;
        }
      }
    }
  }
  CHECK(feasible > 100);  // both paths were exercised
  CHECK(infeasible > 50);
}

TEST_CASE("min_max_split: one layer per stage, one stage, and an all-infinite cost") {
  const auto unit = [](int, int a, int b) { return static_cast<double>(b - a); };
  CHECK(min_max_split(5, 5, unit) == std::vector<int>{0, 1, 2, 3, 4, 5});
  CHECK(min_max_split(5, 1, unit) == std::vector<int>{0, 5});
  CHECK(min_max_split(6, 2, unit) == std::vector<int>{0, 3, 6});
  CHECK(min_max_split(4, 2, [](int, int, int) {
          return std::numeric_limits<double>::infinity();
        }).empty());
}
