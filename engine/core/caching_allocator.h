#pragma once
// A caching allocator for one device, shared by every backend: the CPU backend hands it
// aligned_alloc/free, the CUDA plugin cudaMalloc/cudaFree. Only the raw calls differ, so the
// bookkeeping (size classes, reuse, accounting, limits, the out-of-memory message) is one piece
// of code, unit-tested on any machine.
//
// A freed block goes to a size-keyed free list and is handed out again for a request of about
// its size, so repeated forward/backward passes reuse the same memory instead of asking the
// system (or the CUDA driver, where that costs a synchronisation) for fresh memory. Accounting
// counts the bytes requested by live allocations (cached blocks are not "current"); an optional
// limit makes allocate() throw OutOfMemory, and also bounds what the cache keeps (live plus
// cached stays within the limit). When the system refuses, the cache is returned and the
// request retried once. All methods are thread-safe.
//
// Stream safety (device backends): a block freed while queued work may still read it is only
// reused by work queued after the free on the same stream, which runs after that work. The
// CUDA backend queues all of a device's work, copies included, so that this holds.
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/core/backend.h"

namespace pt {

// The raw memory calls of one device. allocate returns nullptr when the device is out of memory.
struct RawMemory {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* ptr)> release;
  size_t alignment = 64;  // what allocate guarantees; also the rounding unit of small blocks
};

class CachingAllocator {
 public:
  CachingAllocator(std::string device_name, RawMemory raw);
  ~CachingAllocator();  // returns cached and still-live blocks to the system
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // nullptr for 0 bytes. Throws OutOfMemory when the limit or the system says no.
  void* allocate(size_t bytes);
  // `bytes` should be what was requested (the allocator counts what it recorded). A pointer it
  // did not hand out is reported on stderr and ignored: deallocate runs from destructors.
  void deallocate(void* ptr, size_t bytes);

  MemoryStats stats() const;
  void reset_peak();
  void set_limit(size_t bytes);
  size_t cached_bytes() const;
  // Bytes held from the system: live blocks' capacity plus the cache.
  size_t reserved_bytes() const;
  void release_cache();

  // The capacity a request of `bytes` is rounded up to (small blocks to the alignment, large
  // ones to whole 4 KiB pages), so that tensors of nearly the same size share a size class.
  static size_t round_capacity(size_t bytes, size_t alignment);

 private:
  struct Block {
    size_t capacity;   // bytes actually allocated (rounded up)
    size_t requested;  // bytes the caller asked for (what the accounting counts)
  };

  void release_cache_locked();

  std::string device_name_;
  RawMemory raw_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;      // capacity -> cached block
  std::unordered_map<void*, Block> live_;  // handed-out blocks
  size_t current_ = 0, peak_ = 0, limit_ = 0, cached_ = 0, live_capacity_ = 0;
};

}  // namespace pt
