// In-process collectives never hang: a rank that does not arrive makes the others throw
// TimeoutError after the timeout, naming the missing world rank, and the group is unusable after.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/in_process.h"
#include "engine/core/error.h"
#include "tests/comm/run_ranks.h"

namespace pt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

TEST_CASE("in-process all_reduce: a missing rank makes the others time out naming it") {
  constexpr double kTimeout = 0.3;
  auto group = make_in_process_group(3, kTimeout, "dp");
  std::vector<double> waited(3, 0.0);
  std::string late_error;
  auto errors = test::run_ranks(group, [&](Communicator& c) {
    float x = 1.0f;
    if (c.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::duration<double>(3 * kTimeout));
      // Arriving after the others gave up: the group is unusable, and says why, at once.
      try {
        c.barrier("late barrier");
      } catch (const TimeoutError& e) {
        late_error = e.what();
      }
      return;
    }
    const auto t0 = Clock::now();
    try {
      c.all_reduce(&x, 1, ElemType::f32, ReduceOp::sum, "grad bucket 3");
    } catch (...) {
      waited[c.rank()] = seconds_since(t0);
      throw;
    }
  });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    REQUIRE(errors[r]);
    CHECK_THROWS_AS(std::rethrow_exception(errors[r]), TimeoutError);
    const std::string m = test::message_of(errors[r]);
    CHECK(m.find("grad bucket 3") != std::string::npos);
    CHECK(m.find("world rank 2") != std::string::npos);
    CHECK(waited[r] >= kTimeout * 0.9);
    CHECK(waited[r] < kTimeout + 1.5);
  }
  CHECK(!errors[2]);
  CHECK(late_error.find("unusable") != std::string::npos);
  CHECK(late_error.find("world rank 2") != std::string::npos);
}

TEST_CASE("in-process timeout in a split group names the world rank, not the group rank") {
  auto world = make_in_process_group(4, 0.3, "world");
  std::vector<std::string> messages(4);
  test::rethrow_first(test::run_ranks(world, [&](Communicator& c) {
    auto part = c.split(c.rank() % 2, 0, "odd/even");  // groups {0, 2} and {1, 3}
    if (c.rank() == 3) return;  // world rank 3 (rank 1 of group {1, 3}) never arrives
    try {
      part->barrier("stage sync");
    } catch (const TimeoutError& e) {
      messages[c.rank()] = e.what();
    }
  }));
  CHECK(messages[0].empty());
  CHECK(messages[2].empty());
  CHECK(messages[1].find("world rank 3") != std::string::npos);
  CHECK(messages[1].find("'odd/even': rank 0 of 2 (world ranks 1, 3)") != std::string::npos);
}

TEST_CASE("in-process barrier with 2 ranks: the lone rank times out naming the other") {
  auto group = make_in_process_group(2, 0.2, "pair");
  auto errors = test::run_ranks(group, [&](Communicator& c) {
    if (c.rank() == 0) c.barrier("epoch end");
  });
  REQUIRE(errors[0]);
  CHECK(test::message_of(errors[0]).find("world rank 1") != std::string::npos);
  CHECK(test::message_of(errors[0]).find("epoch end") != std::string::npos);
  CHECK(!errors[1]);
}

}  // namespace
}  // namespace pt
