// The caching allocator both backends use (engine/core/caching_allocator.h), driven by a
// counting fake of the raw memory calls: reuse, accounting, limits and the out-of-memory retry.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "engine/core/caching_allocator.h"
#include "engine/core/error.h"

namespace {

// Raw memory that counts calls and can be told to refuse.
struct FakeDevice {
  int allocations = 0, releases = 0;
  size_t capacity_left = size_t{1} << 40;
  std::map<void*, size_t> held;

  pt::RawMemory raw() {
    return pt::RawMemory{[this](size_t bytes) -> void* {
                           if (bytes > capacity_left) return nullptr;
                           void* p = std::aligned_alloc(512, bytes);
                           capacity_left -= bytes;
                           held[p] = bytes;
                           ++allocations;
                           return p;
                         },
                         [this](void* p) {
                           capacity_left += held.at(p);
                           held.erase(p);
                           std::free(p);
                           ++releases;
                         },
                         512};
  }
};

}  // namespace

TEST_CASE("caching allocator: size classes") {
  using pt::CachingAllocator;
  CHECK(CachingAllocator::round_capacity(1, 512) == 512);
  CHECK(CachingAllocator::round_capacity(512, 512) == 512);
  CHECK(CachingAllocator::round_capacity(513, 512) == 1024);
  CHECK(CachingAllocator::round_capacity(100, 64) == 128);
  CHECK(CachingAllocator::round_capacity((64 << 10) + 1, 64) == (64 << 10) + 4096);
}

TEST_CASE("caching allocator: a freed block is reused without asking the device") {
  FakeDevice dev;
  pt::CachingAllocator a("fake:0", dev.raw());
  void* p = a.allocate(1000);
  CHECK(a.stats().current_bytes == 1000);
  a.deallocate(p, 1000);
  CHECK(a.stats().current_bytes == 0);
  CHECK(a.cached_bytes() == 1024);
  void* q = a.allocate(900);  // same size class
  CHECK(q == p);
  CHECK(dev.allocations == 1);
  CHECK(a.stats().peak_bytes == 1000);
  CHECK(a.reserved_bytes() == 1024);
  // Much larger than any cached block: a new one.
  void* big = a.allocate(1 << 20);
  CHECK(big != p);
  CHECK(dev.allocations == 2);
  CHECK(a.stats().current_bytes == 900 + (1 << 20));
  a.deallocate(q, 900);
  a.deallocate(big, 1 << 20);
  a.release_cache();
  CHECK(dev.releases == 2);
  CHECK(a.cached_bytes() == 0);
  CHECK(dev.held.empty());
}

TEST_CASE("caching allocator: the limit refuses with a message naming device and sizes") {
  FakeDevice dev;
  pt::CachingAllocator a("fake:3", dev.raw());
  a.set_limit(4096);
  void* p = a.allocate(3000);
  try {
    (void)a.allocate(2000);
    FAIL("allocate past the limit must throw");
  } catch (const pt::OutOfMemory& e) {
    const std::string m = e.what();
    CHECK(m.find("fake:3") != std::string::npos);
    CHECK(m.find("requested 2000 bytes") != std::string::npos);
    CHECK(m.find("limit of 4096 bytes") != std::string::npos);
  }
  CHECK(a.stats().current_bytes == 3000);
  a.deallocate(p, 3000);
}

TEST_CASE(
    "caching allocator: when the device refuses, the cache is returned and the request retried") {
  FakeDevice dev;
  dev.capacity_left = 3 << 20;
  pt::CachingAllocator a("fake:0", dev.raw());
  void* p = a.allocate(2 << 20);
  a.deallocate(p, 2 << 20);  // cached, still held from the device
  // 3 MiB cannot be served while 2 MiB are cached: the cache goes back and the retry succeeds.
  void* r = a.allocate(3 << 20);
  CHECK(r != nullptr);
  CHECK(dev.releases == 1);
  CHECK(a.cached_bytes() == 0);
  // Now the device is full: a clear error, not a null pointer.
  CHECK_THROWS_AS((void)a.allocate(1 << 20), pt::OutOfMemory);
  a.deallocate(r, 3 << 20);
}

TEST_CASE("caching allocator: unknown pointers are reported, not freed") {
  FakeDevice dev;
  pt::CachingAllocator a("fake:0", dev.raw());
  int local = 0;
  a.deallocate(&local, 4);  // prints a line on stderr; must not crash or change accounting
  CHECK(a.stats().current_bytes == 0);
  CHECK(dev.releases == 0);
}
