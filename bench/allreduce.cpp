// bench/allreduce: all-reduce and point-to-point bandwidth of the communicators, next to the
// machine's memcpy bandwidth measured in the same run (what shared memory can at best approach).
// Prints JSON lines (world rank 0 only):
//
//   {"bench":"memcpy", "bytes", "gbps", "gbps_min", "gbps_max", "reps"}
//       memcpy of `bytes`: the median of 5 copies (after one warm-up) and the spread
//   {"bench":"allreduce", "impl":"mpi"|"in_process", "ranks":R, "bytes", "reps", "time_us",
//    "median_us", "min_us", "max_us", "algbw_gbps", "busbw_gbps", "busbw_median_gbps",
//    "busbw_min_gbps", "wrong"}                              one line per (impl, size)
//       time_us = min_us (the best call); algbw = bytes / time; busbw = algbw * 2(R-1)/R
//       (nccl-tests' all-reduce bus bandwidth: the bytes each rank must send and receive,
//       comparable across R); GB/s = 1e9 bytes/s
//       wrong = elements that differed from the expected sum in the verification call
//   {"bench":"sendrecv", "impl":"mpi", "from":0, "to":R-1, "bytes", "reps", "median_us",
//    "min_us", "max_us", "gbps", "gbps_best", "wrong"}       one line per size, under mpirun
//       one message of `bytes` from world rank 0 to the last rank, timed by the sender until a
//       1-byte reply arrived (so the time includes one small message's latency back);
//       gbps = bytes / median time (bus bandwidth factor 1); wrong = bytes that differed
//
// Timing follows nccl-tests: verify once, warm up once, then N >= 5 timed calls, each started
// after a barrier; a call's time is the slowest rank's. The spread (min, median, max over the
// calls) says how far one figure can be trusted on a shared machine. f32 sums. The in-process
// group (R = 2 threads) always runs; MPI (R = world size) runs under mpirun.
// Exits 3 when a verification failed, 2 on bad flags, 1 on any other failure.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/positive.h"
#include "bench/repeated_seconds.h"
#include "engine/comm/in_process.h"
#include "engine/comm/mpi.h"

namespace {

using Clock = std::chrono::steady_clock;
using pt::bench::emit;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Result {
  double seconds = 0;  // best call (slowest rank's time)
  double median = 0, worst = 0;
  int reps = 0;
  int64_t wrong = 0;
};

// Fills seconds, median and worst from the times of the timed calls.
void summarise(std::vector<double> times, Result& r) {
  const pt::bench::Spread s = pt::bench::spread_of(std::move(times));
  r.reps = s.reps;
  r.seconds = s.min;
  r.worst = s.max;
  r.median = s.median;
}

// One size on one communicator; every rank of `c` calls it.
Result time_all_reduce(pt::Communicator& c, size_t bytes, int reps) {
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  std::vector<float> data(n, static_cast<float>(c.rank() + 1));
  c.all_reduce(data.data(), n, pt::ElemType::f32, pt::ReduceOp::sum, "verify");
  const float want = static_cast<float>(c.size() * (c.size() + 1) / 2);
  Result result;
  for (float v : data) result.wrong += v != want;
  std::fill(data.begin(), data.end(), 0.0f);  // zeros stay zeros: no overflow to inf while timing
  c.all_reduce(data.data(), n, pt::ElemType::f32, pt::ReduceOp::sum, "warm-up");
  std::vector<double> mine(reps);
  for (int i = 0; i < reps; ++i) {
    c.barrier("start");
    const auto t0 = Clock::now();
    c.all_reduce(data.data(), n, pt::ElemType::f32, pt::ReduceOp::sum, "timed");
    mine[i] = seconds_since(t0);
  }
  std::vector<double> all(static_cast<size_t>(reps) * c.size());
  c.all_gather(mine.data(), all.data(), mine.size() * sizeof(double), "times");
  std::vector<double> slowest(reps, 0.0);
  for (int i = 0; i < reps; ++i)
    for (int r = 0; r < c.size(); ++r) slowest[i] = std::max(slowest[i], all[r * reps + i]);
  summarise(slowest, result);
  int64_t wrong = result.wrong;
  c.all_reduce(&wrong, 1, pt::ElemType::i64, pt::ReduceOp::sum, "wrong");
  result.wrong = wrong;
  return result;
}

// One message of `bytes` from rank 0 to the last rank of `c`, answered by 1 byte; every rank of
// `c` calls it (the others only meet in the barriers). The times are the sender's.
Result time_send_recv(pt::Communicator& c, size_t bytes, int reps) {
  const int from = 0, to = c.size() - 1;
  constexpr int kData = 1, kReply = 2;  // tags
  std::vector<unsigned char> data(bytes);
  unsigned char reply = 0;
  auto pattern = [](size_t i) { return static_cast<unsigned char>(i % 251); };
  if (c.rank() == from)
    for (size_t i = 0; i < bytes; ++i) data[i] = pattern(i);
  // One untimed call verifies the bytes and warms the connection up, then `reps` timed ones.
  Result result;
  std::vector<double> times;
  for (int i = 0; i <= reps; ++i) {
    c.barrier("start");
    if (c.rank() == from) {
      const auto t0 = Clock::now();
      auto sent = c.isend(data.data(), bytes, to, kData);
      sent->wait("send");
      c.recv(&reply, 1, to, kReply, "reply");
      if (i > 0) times.push_back(seconds_since(t0));
    } else if (c.rank() == to) {
      c.recv(data.data(), bytes, from, kData, "receive");
      if (i == 0)
        for (size_t j = 0; j < bytes; ++j) result.wrong += data[j] != pattern(j);
      c.isend(&reply, 1, from, kReply)->wait("reply");
    }
  }
  int64_t wrong = result.wrong;
  c.all_reduce(&wrong, 1, pt::ElemType::i64, pt::ReduceOp::sum, "wrong");
  result.wrong = wrong;
  if (c.rank() == from) summarise(times, result);
  return result;
}

// At least 5 timed calls (a median and a spread), ~1 GiB per size for small sizes.
int reps_for(size_t bytes, bool quick) {
  if (quick) return 5;
  return static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / bytes, 5, 50));
}

void emit_result(const std::string& impl, int ranks, size_t bytes, const Result& r) {
  const double algbw = static_cast<double>(bytes) / r.seconds / 1e9;
  emit({
      {"bench", std::string("allreduce")},
      {"impl", impl},
      {"ranks", int64_t{ranks}},
      {"bytes", static_cast<int64_t>(bytes)},
      {"reps", int64_t{r.reps}},
      {"time_us", r.seconds * 1e6},
      {"median_us", r.median * 1e6},
      {"min_us", r.seconds * 1e6},
      {"max_us", r.worst * 1e6},
      {"algbw_gbps", algbw},
      {"busbw_gbps", algbw * 2.0 * (ranks - 1) / ranks},
      {"busbw_median_gbps",
       static_cast<double>(bytes) / r.median / 1e9 * 2.0 * (ranks - 1) / ranks},
      {"busbw_min_gbps", static_cast<double>(bytes) / r.worst / 1e9 * 2.0 * (ranks - 1) / ranks},
      {"wrong", r.wrong},
  });
}

void emit_send_recv(int to, size_t bytes, const Result& r) {
  emit({
      {"bench", std::string("sendrecv")},
      {"impl", std::string("mpi")},
      {"from", int64_t{0}},
      {"to", int64_t{to}},
      {"bytes", static_cast<int64_t>(bytes)},
      {"reps", int64_t{r.reps}},
      {"median_us", r.median * 1e6},
      {"min_us", r.seconds * 1e6},
      {"max_us", r.worst * 1e6},
      {"gbps", static_cast<double>(bytes) / r.median / 1e9},
      {"gbps_best", static_cast<double>(bytes) / r.seconds / 1e9},
      {"wrong", r.wrong},
  });
}

// memcpy of `bytes` between two buffers: GB/s of bytes copied, median of 5 after one warm-up.
pt::bench::Spread memcpy_gbps(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  const pt::bench::Spread s = pt::bench::spread_of(
      pt::bench::repeated_seconds(1, 5, [&] { std::memcpy(b.data(), a.data(), bytes); }));
  if (b[bytes / 2] != 1) std::abort();  // keeps the copy observable
  return pt::bench::rate_of(s, static_cast<double>(bytes) / 1e9);
}

int64_t in_process_bench(const std::vector<size_t>& sizes, bool quick, double timeout_s) {
  constexpr int R = 2;
  auto group = pt::make_in_process_group(R, timeout_s, "bench");
  int64_t wrong = 0;
  for (size_t bytes : sizes) {
    std::vector<Result> results(R);
    std::vector<std::exception_ptr> errors(R);
    std::vector<std::thread> threads;
    for (int r = 0; r < R; ++r)
      threads.emplace_back([&, r] {
        try {
          results[r] = time_all_reduce(*group[r], bytes, reps_for(bytes, quick));
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
    emit_result("in_process", R, bytes, results[0]);
    wrong += results[0].wrong;
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"all-reduce and send/recv bandwidth of the in-process and MPI communicators"};
  double max_mb = 256;
  bool quick = false;
  double timeout_s = 300;
  app.add_option("--max-mb", max_mb, "largest all-reduce, MiB (sizes are 1 KiB * 4^k)")
      ->check(pt::bench::kPositive);
  app.add_flag("--quick", quick, "sizes up to 1 MiB, 5 timed calls each (a smoke run)");
  app.add_option("--timeout", timeout_s, "communicator timeout, seconds")
      ->check(pt::bench::kPositive);
  CLI11_PARSE(app, argc, argv);

  const size_t max_bytes =
      quick ? std::min<size_t>(size_t{1} << 20, static_cast<size_t>(max_mb * (1 << 20)))
            : static_cast<size_t>(max_mb * (1 << 20));
  std::vector<size_t> sizes;
  for (size_t b = 1024; b <= max_bytes; b *= 4) sizes.push_back(b);

  std::unique_ptr<pt::MpiRuntime> mpi;
  try {
    if (pt::launched_by_mpi()) mpi = std::make_unique<pt::MpiRuntime>();
    const bool printer = !mpi || mpi->world_rank() == 0;
    int64_t wrong = 0;
    std::unique_ptr<pt::Communicator> world = mpi ? pt::mpi_world(timeout_s) : nullptr;
    if (world) {
      for (size_t bytes : sizes) {
        const Result r = time_all_reduce(*world, bytes, reps_for(bytes, quick));
        if (printer) emit_result("mpi", world->size(), bytes, r);
        wrong += r.wrong;
      }
      // Point to point needs two ranks (a message to oneself measures nothing).
      for (size_t bytes : world->size() > 1 ? sizes : std::vector<size_t>{}) {
        const Result r = time_send_recv(*world, bytes, reps_for(bytes, quick));
        if (printer) emit_send_recv(world->size() - 1, bytes, r);
        wrong += r.wrong;
      }
    }
    // Rank 0 alone from here; the other ranks wait (sleeping between polls) in the barrier.
    if (printer) {
      const size_t copy_bytes =
          std::max<size_t>(sizes.empty() ? 1024 : sizes.back(), size_t{1} << 20);
      const pt::bench::Spread copy = memcpy_gbps(copy_bytes);
      pt::bench::Fields line{{"bench", std::string("memcpy")},
                             {"bytes", static_cast<int64_t>(copy_bytes)}};
      pt::bench::add_spread(line, "gbps", copy);
      line.emplace_back("reps", int64_t{copy.reps});
      emit(line);
      wrong += in_process_bench(sizes, quick, timeout_s);
    }
    if (world) world->barrier("end");
    world.reset();
    mpi.reset();
    return wrong ? 3 : 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "pipetrain-bench-allreduce: {}\n", e.what());
    if (mpi) pt::MpiRuntime::abort(1);
    return 1;
  }
}
