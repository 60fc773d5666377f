#pragma once
// A caching allocator for one CPU device. Blocks are 64-byte aligned; a freed block goes to a
// size-keyed free list and is handed out again for a request of about its size, so repeated
// forward/backward passes reuse the same pages instead of faulting fresh ones in. Accounting
// counts the bytes requested by live allocations (cached blocks are not "current"); an optional
// limit makes allocate() throw OutOfMemory, and also bounds what the cache keeps (live plus
// cached stays within the limit). All methods are thread-safe.
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/core/backend.h"

namespace pt {

class CpuAllocator {
 public:
  static constexpr size_t kAlignment = 64;

  explicit CpuAllocator(std::string device_name) : device_name_(std::move(device_name)) {}
  ~CpuAllocator();  // returns cached and still-live blocks to the system
  CpuAllocator(const CpuAllocator&) = delete;
  CpuAllocator& operator=(const CpuAllocator&) = delete;

  // nullptr for 0 bytes. Throws OutOfMemory when the limit or the system says no.
  void* allocate(size_t bytes);
  // `bytes` should be what was requested (the allocator counts what it recorded). A pointer it
  // did not hand out is reported on stderr and ignored: deallocate runs from destructors.
  void deallocate(void* ptr, size_t bytes);

  MemoryStats stats() const;
  void reset_peak();
  void set_limit(size_t bytes);
  size_t cached_bytes() const;
  void release_cache();

 private:
  struct Block {
    size_t capacity;   // bytes actually allocated (rounded up)
    size_t requested;  // bytes the caller asked for (what the accounting counts)
  };

  void release_cache_locked();

  std::string device_name_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;         // capacity -> cached block
  std::unordered_map<void*, Block> live_;     // handed-out blocks
  size_t current_ = 0, peak_ = 0, limit_ = 0, cached_ = 0;
};

}  // namespace pt
