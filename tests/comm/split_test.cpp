// In-process split: colour/key grouping as MPI_Comm_split, nested splits, world ranks mapping back
// to the original world, and the parent staying usable.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine/comm/in_process.h"
#include "engine/core/error.h"
#include "tests/comm/run_ranks.h"

namespace pt {
namespace {

struct Seen {
  int rank = -1, size = -1;
  std::vector<int> world;
  int64_t sum = 0;
  std::string describe;
};

TEST_CASE("in-process split: same colour forms a group ordered by (key, rank)") {
  constexpr int R = 4;
  auto world = make_in_process_group(R, 5.0, "world");
  std::vector<Seen> seen(R);
  test::rethrow_first(test::run_ranks(world, [&](Communicator& c) {
    // Colour by parity; keys reverse the order: colour 0 is world (2, 0), colour 1 is (3, 1).
    auto part = c.split(c.rank() % 2, -c.rank(), "parity");
    Seen& s = seen[c.rank()];
    s.rank = part->rank();
    s.size = part->size();
    for (int r = 0; r < part->size(); ++r) s.world.push_back(part->world_rank(r));
    s.sum = c.rank();
    part->all_reduce(&s.sum, 1, ElemType::i64, ReduceOp::sum, "part sum");
    s.describe = part->describe();
    int64_t all = 1;
    c.all_reduce(&all, 1, ElemType::i64, ReduceOp::sum, "parent still works");
    CHECK(all == R);
  }));
  CHECK(seen[0].world == std::vector<int>{2, 0});
  CHECK(seen[1].world == std::vector<int>{3, 1});
  CHECK(seen[0].rank == 1);
  CHECK(seen[2].rank == 0);
  CHECK(seen[3].size == 2);
  CHECK(seen[0].sum == 2);
  CHECK(seen[1].sum == 4);
  CHECK(seen[0].describe == "in_process 'parity': rank 1 of 2 (world ranks 2, 0)");
}

TEST_CASE("in-process split: equal keys keep the parent's order; nested splits map to the world") {
  constexpr int R = 4;
  auto world = make_in_process_group(R, 5.0, "world");
  std::vector<std::vector<int>> inner_world(R);
  std::vector<int64_t> inner_sum(R);
  test::rethrow_first(test::run_ranks(world, [&](Communicator& c) {
    auto half = c.split(c.rank() / 2, 0, "half");  // (0, 1) and (2, 3)
    CHECK(half->world_rank(0) == (c.rank() / 2) * 2);
    // Inside each half, a group of its own per rank, then again by one colour: world ranks survive.
    auto single = half->split(half->rank(), 0, "single");
    CHECK(single->size() == 1);
    CHECK(single->world_rank(0) == c.rank());
    auto again = half->split(0, -half->rank(), "reversed half");
    for (int r = 0; r < again->size(); ++r) inner_world[c.rank()].push_back(again->world_rank(r));
    inner_sum[c.rank()] = c.rank() + 1;
    again->all_reduce(&inner_sum[c.rank()], 1, ElemType::i64, ReduceOp::sum, "inner");
  }));
  CHECK(inner_world[0] == std::vector<int>{1, 0});
  CHECK(inner_world[3] == std::vector<int>{3, 2});
  CHECK(inner_sum[0] == 3);
  CHECK(inner_sum[2] == 7);
}

TEST_CASE("in-process split: a negative colour is a UsageError") {
  auto world = make_in_process_group(1, 1.0, "world");
  CHECK_THROWS_AS(world[0]->split(-1, 0, "bad"), UsageError);
}

}  // namespace
}  // namespace pt
