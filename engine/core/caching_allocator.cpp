#include "engine/core/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

namespace {

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

size_t CachingAllocator::round_capacity(size_t bytes, size_t alignment) {
  const size_t unit = bytes < (size_t{64} << 10) ? alignment : std::max(alignment, size_t{4096});
  return (bytes + unit - 1) / unit * unit;
}

CachingAllocator::CachingAllocator(std::string device_name, RawMemory raw)
    : device_name_(std::move(device_name)), raw_(std::move(raw)) {}

CachingAllocator::~CachingAllocator() {
  release_cache_locked();
  // Live blocks here mean a tensor outlived its backend; free them anyway so leak checkers see
  // the real culprit (the tensor's owner) rather than us.
  for (auto& [ptr, block] : live_) raw_.release(ptr);
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  std::lock_guard lock(mutex_);
  if (limit_ != 0 && current_ + bytes > limit_)
    throw OutOfMemory(fmt::format(
        "out of memory on {}: requested {} bytes ({:.2f} MiB) with {} bytes ({:.2f} MiB) in use "
        "and a limit of {} bytes ({:.2f} MiB); raise the memory limit or use smaller "
        "micro-batches",
        device_name_, bytes, mib(bytes), current_, mib(current_), limit_, mib(limit_)));

  const size_t capacity = round_capacity(bytes, raw_.alignment);
  void* ptr = nullptr;
  size_t got = capacity;
  // Best fit among cached blocks, wasting at most a quarter of the request.
  if (auto it = free_.lower_bound(capacity);
      it != free_.end() && it->first <= capacity + capacity / 4) {
    ptr = it->second;
    got = it->first;
    cached_ -= got;
    free_.erase(it);
  } else {
    // Under a limit, the cache may not hold memory the limit would refuse to live tensors:
    // return the largest cached blocks until live + cached + this block fits.
    while (limit_ != 0 && !free_.empty() && current_ + cached_ + capacity > limit_) {
      auto largest = std::prev(free_.end());
      raw_.release(largest->second);
      cached_ -= largest->first;
      free_.erase(largest);
    }
    ptr = raw_.allocate(capacity);
    if (ptr == nullptr && !free_.empty()) {  // the cache may be what fills memory
      release_cache_locked();
      ptr = raw_.allocate(capacity);
    }
    if (ptr == nullptr)
      throw OutOfMemory(fmt::format(
          "out of memory on {}: the system refused {} bytes ({:.2f} MiB) with {} bytes "
          "({:.2f} MiB) in use (limit {} bytes); use smaller micro-batches or fewer devices",
          device_name_, bytes, mib(bytes), current_, mib(current_), limit_));
  }
  live_.emplace(ptr, Block{got, bytes});
  live_capacity_ += got;
  current_ += bytes;
  peak_ = std::max(peak_, current_);
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {  // a bug elsewhere; say so, but a destructor must not throw
    std::fprintf(stderr, "pipetrain: %s: deallocate(%p, %zu) of memory it did not allocate\n",
                 device_name_.c_str(), ptr, bytes);
    return;
  }
  current_ -= it->second.requested;
  live_capacity_ -= it->second.capacity;
  cached_ += it->second.capacity;
  free_.emplace(it->second.capacity, ptr);
  live_.erase(it);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return MemoryStats{current_, peak_, limit_, live_capacity_ + cached_};
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_ = current_;
}

void CachingAllocator::set_limit(size_t bytes) {
  std::lock_guard lock(mutex_);
  limit_ = bytes;
}

size_t CachingAllocator::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_;
}

size_t CachingAllocator::reserved_bytes() const {
  std::lock_guard lock(mutex_);
  return live_capacity_ + cached_;
}

void CachingAllocator::release_cache() {
  std::lock_guard lock(mutex_);
  release_cache_locked();
}

void CachingAllocator::release_cache_locked() {
  for (auto& [capacity, ptr] : free_) raw_.release(ptr);
  free_.clear();
  cached_ = 0;
}

}  // namespace pt
