// In-process collectives against plain references: every op, element type and reduce op with 1
// to 4 ranks; results must be the same bits on every rank and equal to a sequential sum in rank
// order.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/comm/in_process.h"
#include "engine/core/error.h"
#include "tests/comm/run_ranks.h"

namespace pt {
namespace {

// Rank r's input element i: magnitudes spread over many binades, so that a sum in another order
// would round differently and the bit comparison means something.
template <typename T>
T input(int r, int64_t i) {
  const int64_t h = (r * 7919 + i * 104729 + 17) % 2001 - 1000;
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(h * 1000003 + r);
  else
    return static_cast<T>(
        std::ldexp(static_cast<double>(h) + 0.123, static_cast<int>(i % 23) - 11));
}

// ((x0 + x1) + x2) + ..., then / R for the mean.
template <typename T>
std::vector<T> reference(int R, int64_t n, ReduceOp op) {
  std::vector<T> out(n);
  for (int64_t i = 0; i < n; ++i) {
    T acc = input<T>(0, i);
    for (int r = 1; r < R; ++r) acc += input<T>(r, i);
    out[i] = op == ReduceOp::mean ? acc / static_cast<T>(R) : acc;
  }
  return out;
}

// memcmp, but n == 0 is equal (an empty vector's data() may be null, which memcmp must not get).
bool same_bytes(const void* a, const void* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

template <typename T>
void check_all_reduce(int R, int64_t n, ElemType type, ReduceOp op) {
  CAPTURE(R);
  CAPTURE(n);
  CAPTURE(static_cast<int>(op));
  auto group = make_in_process_group(R, 10.0, "all_reduce");
  std::vector<std::vector<T>> data(R, std::vector<T>(n));
  for (int r = 0; r < R; ++r)
    for (int64_t i = 0; i < n; ++i) data[r][i] = input<T>(r, i);
  test::rethrow_first(test::run_ranks(
      group, [&](Communicator& c) { c.all_reduce(data[c.rank()].data(), n, type, op, "test"); }));
  const std::vector<T> want = reference<T>(R, n, op);
  for (int r = 0; r < R; ++r) CHECK(same_bytes(data[r].data(), want.data(), n * sizeof(T)));
}

template <typename T>
void check_all_reduce_sizes(ElemType type) {
  for (int R = 1; R <= 4; ++R)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean})
      // 0, 1, fewer than R elements, slice boundaries (multiples of R +- 1), a large odd size.
      for (int64_t n : {0, 1, 2, 3, 4, 5, 11, 12, 13, 1000, 4099, (1 << 18) + 3})
        check_all_reduce<T>(R, n, type, op);
}

TEST_CASE("in-process all_reduce: every type and op equals the sequential rank-order reduction") {
  check_all_reduce_sizes<float>(ElemType::f32);
  check_all_reduce_sizes<double>(ElemType::f64);
  check_all_reduce_sizes<int64_t>(ElemType::i64);
}

TEST_CASE("in-process all_reduce: mean of i64 truncates toward zero") {
  auto group = make_in_process_group(3, 10.0, "mean");
  std::vector<std::vector<int64_t>> data = {{-1, 1, 5}, {-1, 1, 5}, {0, 0, 0}};
  test::rethrow_first(test::run_ranks(group, [&](Communicator& c) {
    c.all_reduce(data[c.rank()].data(), 3, ElemType::i64, ReduceOp::mean, "mean");
  }));
  for (const auto& d : data) CHECK(d == std::vector<int64_t>{0, 0, 3});
}

TEST_CASE("in-process reduce_scatter: block r of the rank-order reduction lands on rank r") {
  for (int R = 1; R <= 4; ++R)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean})
      for (int64_t count : {0, 1, 7, 1000}) {
        CAPTURE(R);
        CAPTURE(count);
        auto group = make_in_process_group(R, 10.0, "reduce_scatter");
        std::vector<std::vector<float>> in(R, std::vector<float>(R * count));
        std::vector<std::vector<float>> out(R, std::vector<float>(count, -1.0f));
        for (int r = 0; r < R; ++r)
          for (int64_t i = 0; i < R * count; ++i) in[r][i] = input<float>(r, i);
        test::rethrow_first(test::run_ranks(group, [&](Communicator& c) {
          c.reduce_scatter(in[c.rank()].data(), out[c.rank()].data(), count, op, "rs");
        }));
        const std::vector<float> want = reference<float>(R, R * count, op);
        for (int r = 0; r < R; ++r)
          CHECK(same_bytes(out[r].data(), want.data() + r * count, count * sizeof(float)));
      }
}

TEST_CASE("in-process all_gather and broadcast") {
  for (int R = 1; R <= 4; ++R)
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{13}, size_t{4096}}) {
      CAPTURE(R);
      CAPTURE(bytes);
      auto group = make_in_process_group(R, 10.0, "gather");
      std::vector<std::vector<unsigned char>> in(R, std::vector<unsigned char>(bytes));
      std::vector<std::vector<unsigned char>> out(R, std::vector<unsigned char>(R * bytes));
      for (int r = 0; r < R; ++r)
        for (size_t i = 0; i < bytes; ++i) in[r][i] = static_cast<unsigned char>(r * 31 + i);
      test::rethrow_first(test::run_ranks(group, [&](Communicator& c) {
        c.all_gather(in[c.rank()].data(), out[c.rank()].data(), bytes, "gather");
      }));
      for (int r = 0; r < R; ++r)
        for (int s = 0; s < R; ++s)
          CHECK(same_bytes(out[r].data() + s * bytes, in[s].data(), bytes));

      for (int root = 0; root < R; ++root) {
        std::vector<std::vector<unsigned char>> data = in;
        test::rethrow_first(test::run_ranks(group, [&](Communicator& c) {
          c.broadcast(data[c.rank()].data(), bytes, root, "bcast");
        }));
        for (int r = 0; r < R; ++r) CHECK(data[r] == in[root]);
      }
    }
}

TEST_CASE("in-process collectives back to back: mixed kinds reuse the slots safely") {
  constexpr int R = 4;
  auto group = make_in_process_group(R, 10.0, "mixed");
  std::vector<int> wrong(R, 0);
  test::rethrow_first(test::run_ranks(group, [&](Communicator& c) {
    for (int step = 0; step < 300; ++step) {
      int64_t v[2] = {c.rank() + step, 1};
      c.all_reduce(v, 2, ElemType::i64, ReduceOp::sum, "step");
      if (v[0] != 6 + R * step || v[1] != R) ++wrong[c.rank()];
      if (step % 3 == 0) c.barrier("step barrier");
      int64_t b = c.rank() == step % R ? step : -1;
      c.broadcast(&b, sizeof b, step % R, "step bcast");
      if (b != step) ++wrong[c.rank()];
    }
  }));
  CHECK(wrong == std::vector<int>(R, 0));
}

TEST_CASE("in-process collectives: ranks that disagree on the size get a UsageError naming both") {
  auto group = make_in_process_group(2, 5.0, "mismatch");
  std::vector<float> a(10), b(12);
  auto errors = test::run_ranks(group, [&](Communicator& c) {
    if (c.rank() == 0)
      c.all_reduce(a.data(), 10, ElemType::f32, ReduceOp::sum, "grads");
    else
      c.all_reduce(b.data(), 12, ElemType::f32, ReduceOp::sum, "grads");
  });
  for (const auto& e : errors) {
    REQUIRE(e);
    CHECK_THROWS_AS(std::rethrow_exception(e), UsageError);
    const std::string m = test::message_of(e);
    CHECK(m.find("10 elements") != std::string::npos);
    CHECK(m.find("12 elements") != std::string::npos);
  }
}

TEST_CASE("make_in_process_group rejects bad arguments; describe names the group") {
  CHECK_THROWS_AS(make_in_process_group(0, 1.0, "x"), UsageError);
  CHECK_THROWS_AS(make_in_process_group(2, 0.0, "x"), UsageError);
  auto group = make_in_process_group(2, 1.0, "data-parallel");
  CHECK(group[1]->describe() == "in_process 'data-parallel': rank 1 of 2 (world ranks 0, 1)");
  CHECK(group[1]->world_rank(0) == 0);
  CHECK_THROWS_AS(group[1]->world_rank(2), UsageError);
}

}  // namespace
}  // namespace pt
