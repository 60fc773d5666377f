// In-process isend/recv: buffered sends, matching by (source, tag) in any order, FIFO per tag,
// size mismatches and receive timeouts.
#include <doctest/doctest.h>

#include <chrono>
#include <numeric>
#include <vector>

#include "engine/comm/in_process.h"
#include "engine/core/error.h"
#include "tests/comm/run_ranks.h"

namespace pt {
namespace {

TEST_CASE("in-process isend completes at once and recv matches tags in any order") {
  auto group = make_in_process_group(2, 5.0, "p2p");
  std::vector<int> got(4, -1);
  test::rethrow_first(test::run_ranks(group, [&](Communicator& c) {
    if (c.rank() == 0) {
      const int sends[4][2] = {{1, 10}, {2, 20}, {3, 30}, {3, 31}};  // (tag, value)
      for (const auto& [tag, v] : sends) {
        int value = v;
        auto request = c.isend(&value, sizeof value, 1, tag);
        CHECK(request->test());  // buffered: `value` may change as soon as isend returns
        request->wait("send");
        value = -1;
      }
    } else {
      c.recv(&got[3], sizeof(int), 0, 3, "tag 3 first");  // received out of send order
      c.recv(&got[1], sizeof(int), 0, 1, "tag 1");
      c.recv(&got[2], sizeof(int), 0, 2, "tag 2");
      int second = 0;
      c.recv(&second, sizeof second, 0, 3, "tag 3 again");  // FIFO within a tag
      CHECK(second == 31);
    }
  }));
  CHECK(got[1] == 10);
  CHECK(got[2] == 20);
  CHECK(got[3] == 30);
}

TEST_CASE("in-process ring of 4: every rank sends to the next, receives from the previous") {
  constexpr int R = 4;
  auto group = make_in_process_group(R, 5.0, "ring");
  std::vector<std::vector<double>> received(R, std::vector<double>(1000));
  test::rethrow_first(test::run_ranks(group, [&](Communicator& c) {
    std::vector<double> mine(1000);
    std::iota(mine.begin(), mine.end(), c.rank() * 1000.0);
    auto request = c.isend(mine.data(), mine.size() * sizeof(double), (c.rank() + 1) % R, 7);
    c.recv(received[c.rank()].data(), 1000 * sizeof(double), (c.rank() + R - 1) % R, 7, "ring");
    request->wait("ring send");
  }));
  for (int r = 0; r < R; ++r) {
    CHECK(received[r][0] == ((r + R - 1) % R) * 1000.0);
    CHECK(received[r][999] == ((r + R - 1) % R) * 1000.0 + 999);
  }
}

TEST_CASE("in-process recv of another size is a UsageError naming both sizes") {
  auto group = make_in_process_group(1, 5.0, "self");
  char data[12] = {};
  group[0]->isend(data, 10, 0, 0);
  try {
    group[0]->recv(data, 12, 0, 0, "activations");
    FAIL("no error");
  } catch (const UsageError& e) {
    const std::string m = e.what();
    CHECK(m.find("activations") != std::string::npos);
    CHECK(m.find("10 bytes") != std::string::npos);
    CHECK(m.find("12 bytes") != std::string::npos);
  }
}

TEST_CASE(
    "in-process recv times out naming the source's world rank; bad ranks and tags are refused") {
  auto world = make_in_process_group(3, 0.2, "world");
  auto parts = test::run_ranks(world, [&](Communicator& c) {
    // Group {2, 0} (keys order it): its rank 1 is world rank 0.
    auto part = c.split(c.rank() == 1 ? 1 : 0, -c.rank(), "part");
    if (c.rank() != 2) return;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      char b = 0;
      part->recv(&b, 1, 1, 4, "grad of stage 2");
      FAIL("no timeout");
    } catch (const TimeoutError& e) {
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      CHECK(waited >= 0.19);
      CHECK(waited < 2.0);
      const std::string m = e.what();
      CHECK(m.find("grad of stage 2") != std::string::npos);
      CHECK(m.find("world rank 0") != std::string::npos);
    }
  });
  test::rethrow_first(parts);
  char b = 0;
  CHECK_THROWS_AS(world[0]->isend(&b, 1, 3, 0), UsageError);
  CHECK_THROWS_AS(world[0]->isend(&b, 1, 1, -1), UsageError);
  CHECK_THROWS_AS(world[0]->recv(&b, 1, -1, 0, "x"), UsageError);
  CHECK(world[0]->max_tag() > 32767);
}

}  // namespace
}  // namespace pt
