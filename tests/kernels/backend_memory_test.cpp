// CpuBackend basics: allocator accounting and caching, the memory limit, copies, events,
// threads and describe().
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/kernels/kernel_test_util.h"

using namespace pt;
using namespace pt::test;

TEST_CASE("cpu allocator: current and peak follow live allocations") {
  CpuBackend be(0, 1);
  CHECK(be.memory_stats().current_bytes == 0);
  CHECK(be.memory_stats().peak_bytes == 0);

  void* a = be.allocate(1000);
  void* b = be.allocate(3000);
  CHECK(reinterpret_cast<uintptr_t>(a) % 64 == 0);
  CHECK(reinterpret_cast<uintptr_t>(b) % 64 == 0);
  CHECK(a != b);
  CHECK(be.memory_stats().current_bytes == 4000);  // requested bytes, not rounded capacity
  CHECK(be.memory_stats().peak_bytes == 4000);

  be.deallocate(b, 3000);
  CHECK(be.memory_stats().current_bytes == 1000);
  CHECK(be.memory_stats().peak_bytes == 4000);
  be.reset_peak();
  CHECK(be.memory_stats().peak_bytes == 1000);

  void* c = be.allocate(500);
  CHECK(be.memory_stats().current_bytes == 1500);
  CHECK(be.memory_stats().peak_bytes == 1500);
  be.deallocate(a, 1000);
  be.deallocate(c, 500);
  CHECK(be.memory_stats().current_bytes == 0);
  CHECK(be.memory_stats().peak_bytes == 1500);

  CHECK(be.allocate(0) == nullptr);
  be.deallocate(nullptr, 0);
  CHECK(be.memory_stats().current_bytes == 0);
}

TEST_CASE("cpu allocator: freed blocks are cached and reused, and do not count as current") {
  CpuBackend be(0, 1);
  void* a = be.allocate(1 << 20);
  CHECK(be.cached_bytes() == 0);
  be.deallocate(a, 1 << 20);
  CHECK(be.cached_bytes() == (1 << 20));
  CHECK(be.memory_stats().current_bytes == 0);

  void* b = be.allocate(1 << 20);  // same size class: the same block comes back
  CHECK(b == a);
  CHECK(be.cached_bytes() == 0);
  CHECK(be.memory_stats().current_bytes == (1 << 20));

  void* small = be.allocate(100);  // a tiny request must not take a large cached block
  be.deallocate(b, 1 << 20);
  void* small2 = be.allocate(100);
  CHECK(small2 != b);
  CHECK(be.cached_bytes() == (1 << 20));

  // Tensors go through the same path: a tensor of the same size reuses the freed block.
  void* first = nullptr;
  {
    Tensor t = be.empty(Shape{256, 1024});
    first = t.data();
    CHECK(be.memory_stats().current_bytes == 200 + (1 << 20));
  }
  CHECK(first == b);
  CHECK(be.memory_stats().current_bytes == 200);
  {
    Tensor t = be.empty(Shape{256, 1024});
    CHECK(t.data() == first);
  }

  be.deallocate(small, 100);
  be.deallocate(small2, 100);
  be.release_cache();
  CHECK(be.cached_bytes() == 0);
  CHECK(be.memory_stats().current_bytes == 0);
}

TEST_CASE("cpu allocator: the memory limit throws OutOfMemory naming device and numbers") {
  CpuBackend be(3, 1);
  be.set_memory_limit(1 << 20);
  CHECK(be.memory_stats().limit_bytes == (1 << 20));
  void* a = be.allocate(600000);
  std::string message;
  try {
    (void)be.allocate(500000);
  } catch (const OutOfMemory& e) {
    message = e.what();
  }
  CHECK(message.find("cpu:3") != std::string::npos);
  CHECK(message.find("500000") != std::string::npos);   // requested
  CHECK(message.find("600000") != std::string::npos);   // current
  CHECK(message.find("1048576") != std::string::npos);  // limit
  // The failed request changed nothing; exactly up to the limit is fine.
  CHECK(be.memory_stats().current_bytes == 600000);
  void* b = be.allocate((1 << 20) - 600000);
  CHECK(be.memory_stats().current_bytes == (1 << 20));
  CHECK_THROWS_AS((void)be.empty(Shape{1}), OutOfMemory);
  be.deallocate(b, (1 << 20) - 600000);

  // Cached blocks do not count against the limit.
  be.deallocate(a, 600000);
  void* c = be.allocate(900000);
  be.deallocate(c, 900000);
  be.set_memory_limit(0);  // unlimited again
  void* d = be.allocate(8 << 20);
  be.deallocate(d, 8 << 20);
  CHECK(be.memory_stats().current_bytes == 0);
}

TEST_CASE("cpu allocator: concurrent allocate/deallocate keeps the books straight") {
  CpuBackend be(0, 1);
  // Two threads churn different size classes through the shared free lists.
  std::thread t1([&] {
    for (int i = 0; i < 3000; ++i) {
      void* p = be.allocate(128 + static_cast<size_t>(i % 5) * 64);
      be.deallocate(p, 128 + static_cast<size_t>(i % 5) * 64);
    }
  });
  std::thread t2([&] {
    for (int i = 0; i < 3000; ++i) {
      void* p = be.allocate(4096 + static_cast<size_t>(i % 3) * 4096);
      be.deallocate(p, 4096 + static_cast<size_t>(i % 3) * 4096);
    }
  });
  t1.join();
  t2.join();
  CHECK(be.memory_stats().current_bytes == 0);
  CHECK(be.memory_stats().peak_bytes <= 128 + 4 * 64 + 3 * 4096);
}

TEST_CASE("cpu backend: copies, peer copies and events") {
  CpuBackend a(0, 1), b(1, 1);
  const std::vector<float> host = random_floats(1000, 1);
  Floats src(a, host);
  Floats dst(b, 1000, 0.f);
  CHECK(a.copy_to_peer(b, dst.get(), src.get(),
                       1000 * sizeof(float)));  // CPU devices reach each other
  a.record_event()->synchronize();
  CHECK(same_bits(dst.read(), host));

  Floats within(a, 1000, 0.f);
  a.copy_within(within.get(), src.get(), 1000 * sizeof(float));
  CHECK(same_bits(within.read(), host));
  // Each device keeps its own accounting.
  CHECK(a.memory_stats().current_bytes == 2 * 4000);
  CHECK(b.memory_stats().current_bytes == 4000);
}

TEST_CASE("cpu backend: device, threads and describe") {
  auto be = make_cpu_backend(2, 1);
  CHECK(be->device() == DeviceId{DeviceKind::cpu, 2});
  CHECK(be->num_threads() == 1);
  CHECK(be->describe().rfind("cpu:2 (1 thread, oneDNN ", 0) == 0);
  be->set_num_threads(2);
  CHECK(be->num_threads() == 2);
  CHECK(be->describe().find("(2 threads, oneDNN ") != std::string::npos);
  be->bind_current_thread();
  CHECK_THROWS_AS(be->set_num_threads(0), UsageError);
  CHECK_THROWS_AS(CpuBackend(0, 0), UsageError);
}

TEST_CASE("cpu allocator: under a limit the cache gives memory back before growing past it") {
  CpuBackend be(0, 1);
  be.set_memory_limit(1 << 20);
  void* a = be.allocate(600000);
  be.deallocate(a, 600000);
  CHECK(be.cached_bytes() >= 600000);
  void* b = be.allocate(700000);  // no cached block fits; keeping the old one would exceed 1 MiB
  CHECK(be.cached_bytes() == 0);
  be.deallocate(b, 700000);
  void* c = be.allocate(100000);  // small enough to keep the 700000 block cached
  CHECK(be.cached_bytes() >= 700000);
  be.deallocate(c, 100000);
}
