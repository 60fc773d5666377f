// The NCCL communicator against a reference computed on the host: one rank on cuda:0 (what one
// GPU allows: NCCL takes one rank per GPU), and one rank per GPU, in threads, where there are
// several. The bootstrap (NCCL's unique id) goes over an in-process group, as it goes over MPI
// between processes.
#include <doctest/doctest.h>

#include <memory>
#include <thread>
#include <vector>

#include "engine/comm/in_process.h"
#include "engine/core/random.h"
#include "engine/devices/cuda_plugin.h"

using namespace pt;

namespace {

std::vector<float> values(size_t n, uint64_t seed) {
  CounterRng rng(seed);
  std::vector<float> v(n);
  for (float& x : v)
    x = static_cast<float>(rng.next_below(1000)) - 500.f;  // integers: sums are exact
  return v;
}

// Each rank's values on its GPU, all-reduced, read back; plus all_gather and broadcast.
void exercise(Communicator& bootstrap, Backend& gpu, int ranks,
              std::vector<std::vector<float>>& out) {
  auto nccl = make_nccl_communicator(bootstrap, gpu, "nccl test");
  CHECK(nccl->device_memory());
  CHECK(nccl->size() == ranks);
  const int r = nccl->rank();
  const size_t n = 1 << 20;
  std::vector<float> mine = values(n, 10 + static_cast<uint64_t>(r));
  Tensor t = gpu.empty(Shape{static_cast<int64_t>(n)});
  gpu.copy_from_host(t.data(), mine.data(), n * sizeof(float));
  nccl->all_reduce(t.data(), static_cast<int64_t>(n), ElemType::f32, ReduceOp::sum,
                   "test all-reduce");
  std::vector<float> reduced(n);
  gpu.copy_to_host(reduced.data(), t.data(), n * sizeof(float));
  out[static_cast<size_t>(r)] = reduced;

  Tensor gathered = gpu.empty(Shape{static_cast<int64_t>(ranks) * 4});
  Tensor piece = gpu.empty(Shape{4});
  const std::vector<float> four(4, static_cast<float>(r + 1));
  gpu.copy_from_host(piece.data(), four.data(), sizeof(float) * 4);
  nccl->all_gather(piece.data(), gathered.data(), sizeof(float) * 4, "test all-gather");
  std::vector<float> g(static_cast<size_t>(ranks) * 4);
  gpu.copy_to_host(g.data(), gathered.data(), g.size() * sizeof(float));
  for (int k = 0; k < ranks; ++k)
    for (int i = 0; i < 4; ++i)
      CHECK(g[static_cast<size_t>(k * 4 + i)] == static_cast<float>(k + 1));

  nccl->broadcast(piece.data(), sizeof(float) * 4, 0, "test broadcast");
  std::vector<float> b(4);
  gpu.copy_to_host(b.data(), piece.data(), sizeof(b[0]) * 4);
  CHECK(b == std::vector<float>(4, 1.f));
  nccl->barrier("test barrier");
}

}  // namespace

TEST_CASE("nccl: one rank on cuda:0 (all-reduce is the identity, gather and broadcast)") {
  auto gpu = make_cuda_backend(0, 0, CudaPrecision::fp32);
  auto group = make_in_process_group(1, 30, "bootstrap");
  std::vector<std::vector<float>> out(1);
  exercise(*group[0], *gpu, 1, out);
  CHECK(out[0] == values(1 << 20, 10));
}

TEST_CASE("nccl: one rank per GPU, all-reduce equals the host sum on every rank") {
  const int gpus = static_cast<int>(cuda_status().devices.size());
  if (gpus < 2) {
    MESSAGE("one GPU: the multi-rank NCCL case needs two or more (NCCL allows one rank per GPU)");
    return;
  }
  std::vector<std::unique_ptr<Backend>> backends;
  for (int d = 0; d < gpus; ++d) backends.push_back(make_cuda_backend(d, 0, CudaPrecision::fp32));
  auto group = make_in_process_group(gpus, 60, "bootstrap");
  std::vector<std::vector<float>> out(static_cast<size_t>(gpus));
  std::vector<std::thread> threads;
  for (int d = 0; d < gpus; ++d)
    threads.emplace_back([&, d] {
      backends[static_cast<size_t>(d)]->bind_current_thread();
      exercise(*group[static_cast<size_t>(d)], *backends[static_cast<size_t>(d)], gpus, out);
    });
  for (auto& t : threads) t.join();
  std::vector<float> want(1 << 20, 0.f);
  for (int r = 0; r < gpus; ++r) {
    const auto v = values(want.size(), 10 + static_cast<uint64_t>(r));
    for (size_t i = 0; i < want.size(); ++i) want[i] += v[i];
  }
  for (int r = 0; r < gpus; ++r) CHECK(out[static_cast<size_t>(r)] == want);
}
