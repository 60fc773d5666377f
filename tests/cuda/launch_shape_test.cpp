#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/launch_shape.h"

using namespace pt::cuda;

// The grid-stride loop covers [0, n) iff blocks * threads * per_thread >= n, and no thread is
// idle in the first pass iff (blocks - 1) * threads < n.
static void check_covers(int64_t n, const LaunchShape1d& s) {
  CAPTURE(n);
  CAPTURE(s.blocks);
  CAPTURE(s.threads);
  CAPTURE(s.per_thread);
  CHECK(s.blocks >= 1);
  CHECK(s.blocks <= kMaxBlocks);
  CHECK(s.blocks * s.threads * s.per_thread >= n);
  CHECK(s.blocks * s.threads * (s.per_thread - 1) < n);
  CHECK((s.blocks - 1) * s.threads < n);
}

TEST_CASE("ceil_div") {
  CHECK(ceil_div(0, 256) == 0);
  CHECK(ceil_div(1, 256) == 1);
  CHECK(ceil_div(256, 256) == 1);
  CHECK(ceil_div(257, 256) == 2);
  CHECK(ceil_div(INT64_MAX, 1) == INT64_MAX);
  CHECK(ceil_div(INT64_MAX, 2) == INT64_MAX / 2 + 1);  // no overflow in a + b - 1
}

TEST_CASE("launch_shape_1d: zero elements launch nothing") {
  constexpr LaunchShape1d s = launch_shape_1d(0);
  CHECK(s.blocks == 0);
  CHECK(s.per_thread == 0);
  CHECK(s.threads == kDefaultThreads);
}

TEST_CASE("launch_shape_1d: one element per thread below the cap") {
  static_assert(launch_shape_1d(1).blocks == 1);
  CHECK(launch_shape_1d(1).per_thread == 1);
  CHECK(launch_shape_1d(256).blocks == 1);
  CHECK(launch_shape_1d(257).blocks == 2);
  CHECK(launch_shape_1d(100003).blocks == 391);  // ceil(100003 / 256), the plugin's self-test
  CHECK(launch_shape_1d(100003).per_thread == 1);
  CHECK(launch_shape_1d(1000, 128).blocks == 8);
  CHECK(launch_shape_1d(1000, 128).threads == 128);
  for (int64_t n : {1, 2, 255, 256, 257, 511, 512, 513, 100003}) {
    check_covers(n, launch_shape_1d(n));
  }
}

TEST_CASE("launch_shape_1d: the grid is capped and threads loop") {
  const int64_t at_cap = kMaxBlocks * kDefaultThreads;
  CHECK(launch_shape_1d(at_cap).blocks == kMaxBlocks);
  CHECK(launch_shape_1d(at_cap).per_thread == 1);
  CHECK(launch_shape_1d(at_cap + 1).blocks == kMaxBlocks);
  CHECK(launch_shape_1d(at_cap + 1).per_thread == 2);
  // 2^40 elements (4 TiB of floats): still a valid grid, no overflow.
  const int64_t huge = int64_t{1} << 40;
  const LaunchShape1d s = launch_shape_1d(huge);
  CHECK(s.blocks == kMaxBlocks);
  CHECK(s.per_thread == ceil_div(huge, kMaxBlocks * kDefaultThreads));
  for (int64_t n : {at_cap - 1, at_cap, at_cap + 1, 3 * at_cap + 7, huge}) {
    check_covers(n, launch_shape_1d(n));
  }
  // A small cap, to see the loop without huge numbers: 10 elements, 2 blocks of 2 threads.
  const LaunchShape1d small = launch_shape_1d(10, 2, 2);
  CHECK(small.blocks == 2);
  CHECK(small.per_thread == 3);
}
