// The MPI communicator, run under mpirun with 2 and 4 ranks (tests/CMakeLists.txt): every operation
// against a reference each rank computes locally from every rank's deterministic input. Prints one
// PASS/FAIL line per check (world rank 0) and the details of a failure (the failing rank); exits 1
// on any failure.
//
//   comm_mpi_test                   the checks below
//   comm_mpi_test --timeout-check   world rank 1 skips one all-reduce: every other rank must get a
//                                   TimeoutError naming it; then all ranks re-synchronise and exit
//   comm_mpi_test --dead-sender-check  (-np 2, mpirun --mca orte_abort_on_non_zero_status 0)
//                                   world rank 1 starts sending 256 MiB and kills itself (-9): the
//                                   receive on rank 0 must end in a TimeoutError within its timeout
//                                   and a short grace, not hang (a message that had begun to
//                                   arrive can be neither cancelled nor completed)
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "engine/comm/mpi.h"
#include "engine/core/error.h"

namespace {

using pt::Communicator;
using pt::ElemType;
using pt::ReduceOp;

int g_world_rank = 0;

// Failures of the current check on this rank; details go to stderr at once.
struct Expect {
  int failures = 0;
  void operator()(bool ok, std::string_view what) {
    if (ok) return;
    ++failures;
    fmt::print(stderr, "[world rank {}] FAIL: {}\n", g_world_rank, what);
  }
};

// Runs `op`, which must end in a TimeoutError after [min_s, max_s) seconds; returns the error's
// text, or nothing when it did not throw (recorded in `expect` with `if_not`).
std::optional<std::string> expect_timeout(Expect& expect, double min_s, double max_s,
                                          std::string_view if_not,
                                          const std::function<void()>& op) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    op();
  } catch (const pt::TimeoutError& e) {
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    expect(waited >= min_s && waited < max_s, fmt::format("waited {} s", waited));
    fmt::print(stderr, "[world rank {}] got, as expected, after {:.1f} s: {}\n", g_world_rank,
               waited, e.what());
    return e.what();
  }
  expect(false, if_not);
  return std::nullopt;
}

// The end of a check with a dead peer (MPI_Finalize might wait for it): this rank's verdict.
[[noreturn]] void exit_with_verdict(const Expect& expect, std::string_view check) {
  fmt::print("[world rank {}] {} {}\n", g_world_rank, expect.failures ? "FAIL" : "PASS", check);
  std::fflush(stdout);
  std::_Exit(expect.failures ? 1 : 0);
}

// Rank r's element i: small integers, so that any summation order gives the exact reference.
template <typename T>
T exact_input(int r, int64_t i) {
  return static_cast<T>((r + 1) * (i % 13) - 5 * r);
}

// Rank r's element i spread over many binades: rounding depends on the order, for the check that
// all ranks get the same bits.
float rough_input(int r, int64_t i) {
  return std::ldexp(static_cast<float>((r * 7919 + i * 104729) % 2001 - 1000) + 0.37f,
                    static_cast<int>(i % 23) - 11);
}

uint64_t fnv1a(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i)
    h = (h ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
  return h;
}

template <typename T>
void all_reduce_exact(Communicator& c, Expect& expect, int64_t n, ElemType type, ReduceOp op) {
  std::vector<T> data(n);
  for (int64_t i = 0; i < n; ++i) data[i] = exact_input<T>(c.rank(), i);
  c.all_reduce(data.data(), n, type, op, "exact");
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    T sum = 0;
    for (int r = 0; r < c.size(); ++r) sum += exact_input<T>(r, i);
    const T want = op == ReduceOp::mean ? sum / static_cast<T>(c.size()) : sum;
    wrong += data[i] != want;
  }
  expect(wrong == 0, fmt::format("all_reduce n={} type={} op={}: {} wrong elements", n,
                                 static_cast<int>(type), static_cast<int>(op), wrong));
}

void check_all_reduce(Communicator& c, Expect& expect) {
  const int64_t chunk_f32 = (int64_t{4} << 20) / 4;  // elements in one 4 MiB piece
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean})
    for (int64_t n :
         {int64_t{0}, int64_t{1}, int64_t{1000}, chunk_f32 - 1, chunk_f32, chunk_f32 + 3}) {
      all_reduce_exact<float>(c, expect, n, ElemType::f32, op);
      all_reduce_exact<double>(c, expect, n, ElemType::f64, op);
      all_reduce_exact<int64_t>(c, expect, n, ElemType::i64, op);
    }
}

void check_large_all_reduce(Communicator& c, Expect& expect) {
  all_reduce_exact<float>(c, expect, (int64_t{9} << 20) / 4, ElemType::f32,
                          ReduceOp::sum);  // 9 MiB
}

void check_same_bits_everywhere(Communicator& c, Expect& expect) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
    std::vector<float> data((int64_t{5} << 20) / 4 + 7);  // crosses a chunk boundary
    for (size_t i = 0; i < data.size(); ++i)
      data[i] = rough_input(c.rank(), static_cast<int64_t>(i));
    c.all_reduce(data.data(), static_cast<int64_t>(data.size()), ElemType::f32, op, "rough");
    const uint64_t mine = fnv1a(data.data(), data.size() * sizeof(float));
    std::vector<uint64_t> all(c.size());
    c.all_gather(&mine, all.data(), sizeof mine, "hashes");
    for (int r = 0; r < c.size(); ++r)
      expect(all[r] == all[0], fmt::format("all_reduce bits of rank {} differ from rank 0's", r));
  }
}

void check_reduce_scatter(Communicator& c, Expect& expect) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean})
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{1000}}) {
      std::vector<float> in(c.size() * count), out(count, -1.0f);
      for (size_t i = 0; i < in.size(); ++i)
        in[i] = exact_input<float>(c.rank(), static_cast<int64_t>(i));
      c.reduce_scatter(in.data(), out.data(), count, op, "rs");
      int64_t wrong = 0;
      for (int64_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int r = 0; r < c.size(); ++r) sum += exact_input<float>(r, c.rank() * count + i);
        wrong += out[i] != (op == ReduceOp::mean ? sum / static_cast<float>(c.size()) : sum);
      }
      expect(wrong == 0, fmt::format("reduce_scatter count={}: {} wrong", count, wrong));
    }
}

void check_all_gather_broadcast(Communicator& c, Expect& expect) {
  for (size_t bytes : {size_t{1}, size_t{1000}}) {
    std::vector<unsigned char> in(bytes), out(c.size() * bytes);
    for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<unsigned char>(c.rank() * 31 + i);
    c.all_gather(in.data(), out.data(), bytes, "gather");
    for (int r = 0; r < c.size(); ++r)
      for (size_t i = 0; i < bytes; ++i)
        if (out[r * bytes + i] != static_cast<unsigned char>(r * 31 + i)) {
          expect(false, fmt::format("all_gather {} bytes: block {} byte {}", bytes, r, i));
          r = c.size();
          break;
        }
  }
  for (size_t bytes : {size_t{1}, size_t{9} << 20})  // 9 MiB: three broadcast pieces
    for (int root = 0; root < c.size(); ++root) {
      std::vector<unsigned char> data(bytes,
                                      static_cast<unsigned char>(c.rank() == root ? root + 1 : 0));
      c.broadcast(data.data(), bytes, root, "bcast");
      size_t wrong = 0;
      for (unsigned char b : data) wrong += b != root + 1;
      expect(wrong == 0, fmt::format("broadcast {} bytes from {}: {} wrong", bytes, root, wrong));
    }
  c.barrier("barrier");
}

void check_split(Communicator& c, Expect& expect) {
  // Two groups by parity; keys reverse the order inside each.
  auto part = c.split(c.rank() % 2, -c.rank(), "parity");
  const int members = (c.size() + 1 - c.rank() % 2) / 2;
  expect(part->size() == members, fmt::format("split size {} != {}", part->size(), members));
  for (int r = 0; r < part->size(); ++r) {
    const int want = c.rank() % 2 + 2 * (members - 1 - r);
    expect(part->world_rank(r) == want,
           fmt::format("split world_rank({}) = {} != {}", r, part->world_rank(r), want));
  }
  int64_t sum = c.rank();
  part->all_reduce(&sum, 1, ElemType::i64, ReduceOp::sum, "part");
  int64_t want = 0;
  for (int r = c.rank() % 2; r < c.size(); r += 2) want += r;
  expect(sum == want, fmt::format("split all_reduce {} != {}", sum, want));
  auto single = part->split(part->rank(), 0, "single");  // nested: world ranks still map back
  expect(single->size() == 1 && single->world_rank(0) == c.rank(), "nested split world rank");
  expect(part->describe().find("mpi 'parity'") == 0, part->describe());
}

void check_point_to_point(Communicator& c, Expect& expect) {
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  expect(c.max_tag() >= 32767, fmt::format("max_tag {}", c.max_tag()));
  // Two tags, received in the other order; one large message (rendezvous protocol).
  std::vector<double> big(1 << 18), got_big(1 << 18);
  for (size_t i = 0; i < big.size(); ++i) big[i] = c.rank() * 1e6 + static_cast<double>(i);
  const int small = c.rank() * 10;
  auto s1 = c.isend(&small, sizeof small, next, 1);
  auto s2 = c.isend(big.data(), big.size() * sizeof(double), next, 2);
  c.recv(got_big.data(), got_big.size() * sizeof(double), prev, 2, "ring big");
  int got_small = -1;
  c.recv(&got_small, sizeof got_small, prev, 1, "ring small");
  s1->wait("ring small send");
  s2->wait("ring big send");
  expect(got_small == prev * 10, fmt::format("ring small {} != {}", got_small, prev * 10));
  expect(got_big[12345] == prev * 1e6 + 12345, "ring big payload");
  // Another size than expected: smaller and larger messages are both UsageErrors.
  char bytes[16] = {};
  auto s3 = c.isend(bytes, 10, next, 3);
  auto s4 = c.isend(bytes, 16, next, 4);
  for (int tag : {3, 4}) {
    try {
      c.recv(bytes, 12, prev, tag, "mismatch");
      expect(false, fmt::format("recv of a mismatched size (tag {}) did not throw", tag));
    } catch (const pt::UsageError& e) {
      const std::string m = e.what();
      expect(m.find("12 bytes") != std::string::npos, m);
      if (tag == 3) expect(m.find("10 bytes") != std::string::npos, m);
    }
  }
  s3->wait("s3");
  s4->wait("s4");
}

void check_recv_timeout(Communicator& quick, Expect& expect) {
  const int prev = (quick.rank() + quick.size() - 1) % quick.size();
  char b = 0;
  if (const auto m = expect_timeout(expect, quick.timeout_s() * 0.9, quick.timeout_s() + 2,
                                    "recv without a send did not time out",
                                    [&] { quick.recv(&b, 1, prev, 99, "never sent"); }))
    expect(m->find(fmt::format("world rank {}", prev)) != std::string::npos, *m);
  quick.barrier("after recv timeout");  // a timed-out receive leaves the communicator usable
}

// World rank 1 skips an all-reduce: the others time out naming it. Then everyone meets on another
// communicator; rank 1 posts the skipped all-reduce late so the abandoned one completes.
int timeout_check(pt::MpiRuntime& mpi) {
  auto quick = pt::mpi_world(0.5);
  auto control = pt::mpi_world(60.0);
  Expect expect;
  std::vector<float> buffer(1000, 1.0f);  // stays alive: MPI may still write the abandoned one
  if (mpi.world_rank() != 1) {
    if (const auto m = expect_timeout(expect, 0.45, 3.0, "no TimeoutError", [&] {
          quick->all_reduce(buffer.data(), 1000, ElemType::f32, ReduceOp::sum, "skipped by rank 1");
        })) {
      expect(m->find("skipped by rank 1") != std::string::npos, *m);
      expect(m->find(mpi.world_size() == 2 ? "world rank 1" : "world ranks ") != std::string::npos,
             *m);
    }
    try {
      quick->barrier("after the timeout");
      expect(false, "a communicator with an abandoned collective was used again");
    } catch (const pt::UsageError&) {
    }
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    quick->all_reduce(buffer.data(), 1000, ElemType::f32, ReduceOp::sum, "late");
  }
  control->barrier("re-synchronise");
  int64_t failures = expect.failures;
  control->all_reduce(&failures, 1, ElemType::i64, ReduceOp::sum, "failures");
  if (mpi.world_rank() == 0) fmt::print("{} timeout check\n", failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}

int dead_sender_check(pt::MpiRuntime& mpi) {
  auto world = pt::mpi_world(1.0);
  std::vector<std::byte> buffer(size_t{256} << 20);  // stays alive: MPI may still write it
  world->barrier("both ready");
  if (mpi.world_rank() == 1) {
    [[maybe_unused]] auto sending = world->isend(buffer.data(), buffer.size(), 0, 5);
    std::raise(SIGKILL);  // dies with the transfer begun: what a killed process leaves behind
  }
  Expect expect;
  if (const auto m = expect_timeout(
          expect, 0.9, 6.0,
          "the receive completed although the sender died before it could progress",
          [&] { world->recv(buffer.data(), buffer.size(), 1, 5, "from a sender that dies"); }))
    expect(m->find("world rank 1") != std::string::npos, *m);
  exit_with_verdict(expect, "dead sender check");  // rank 0 alone, with a dead peer
}

// World rank 1 is killed (-9) instead of joining a large all-reduce (the point-to-point path,
// engine/comm/mpi.cpp): every other rank's wait ends within the timeout (plus the collectives'
// grace) with an error that names world rank 1 and no other. Each survivor prints its verdict.
int dead_reducer_check(pt::MpiRuntime& mpi) {
  auto world = pt::mpi_world(1.0);
  std::vector<float> buffer((size_t{8} << 20) / sizeof(float), 1.0f);  // alive: MPI may write it
  world->barrier("all ready");
  if (mpi.world_rank() == 1) std::raise(SIGKILL);
  Expect expect;
  if (const auto m = expect_timeout(
          expect, 0.9, 6.0, "the all-reduce completed although world rank 1 died before joining it",
          [&] {
            world->all_reduce(buffer.data(), static_cast<int64_t>(buffer.size()), ElemType::f32,
                              ReduceOp::sum, "gradients of a dead replica");
          })) {
    expect(m->find("gradients of a dead replica") != std::string::npos, *m);
    expect(m->find("waiting for world rank 1") != std::string::npos, *m);
    expect(m->find("waiting for world ranks") == std::string::npos, *m);  // only the dead one
  }
  exit_with_verdict(expect, "dead reducer check");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    pt::MpiRuntime mpi;
    g_world_rank = mpi.world_rank();
    if (!pt::launched_by_mpi())
      fmt::print(stderr, "warning: launched_by_mpi() is false under mpirun\n");
    if (argc > 1 && std::string_view(argv[1]) == "--dead-sender-check")
      return dead_sender_check(mpi);
    if (argc > 1 && std::string_view(argv[1]) == "--dead-reducer-check")
      return dead_reducer_check(mpi);
    if (argc > 1 && std::string_view(argv[1]) == "--timeout-check") {
      const int rc = timeout_check(mpi);
      if (rc) pt::MpiRuntime::abort(rc);
      return 0;
    }
    auto world = pt::mpi_world(30.0);
    auto quick = pt::mpi_world(0.3);
    auto control = pt::mpi_world(60.0);  // reports results even when `world` broke
    const std::vector<std::pair<std::string, std::function<void(Expect&)>>> checks = {
        {"world ranks",
         [&](Expect& e) {
           e(world->size() == mpi.world_size() && world->rank() == mpi.world_rank(), "rank/size");
           for (int r = 0; r < world->size(); ++r)
             e(world->world_rank(r) == r, "world_rank(r) == r");
         }},
        {"all_reduce (every type and op, chunk boundaries)",
         [&](Expect& e) { check_all_reduce(*world, e); }},
        {"all_reduce 9 MiB", [&](Expect& e) { check_large_all_reduce(*world, e); }},
        {"all_reduce same bits on every rank",
         [&](Expect& e) { check_same_bits_everywhere(*world, e); }},
        {"reduce_scatter", [&](Expect& e) { check_reduce_scatter(*world, e); }},
        {"all_gather, broadcast, barrier",
         [&](Expect& e) { check_all_gather_broadcast(*world, e); }},
        {"split (two groups, nested)", [&](Expect& e) { check_split(*world, e); }},
        {"isend/recv ring, tags, size mismatch",
         [&](Expect& e) { check_point_to_point(*world, e); }},
        {"recv timeout", [&](Expect& e) { check_recv_timeout(*quick, e); }},
    };
    int64_t failed_checks = 0;
    for (const auto& [name, run] : checks) {
      Expect expect;
      try {
        run(expect);
      } catch (const std::exception& e) {
        expect(false, fmt::format("{} threw: {}", name, e.what()));
      }
      int64_t failures = expect.failures;
      control->all_reduce(&failures, 1, ElemType::i64, ReduceOp::sum, "failures");
      failed_checks += failures != 0;
      if (mpi.world_rank() == 0) fmt::print("{} {}\n", failures ? "FAIL" : "PASS", name);
      std::fflush(stdout);
    }
    if (failed_checks) pt::MpiRuntime::abort(1);  // a broken communicator could hang MPI_Finalize
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "[world rank {}] error: {}\n", g_world_rank, e.what());
    pt::MpiRuntime::abort(1);
  }
}
