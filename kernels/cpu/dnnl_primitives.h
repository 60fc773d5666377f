#pragma once
// What the CPU ops built on oneDNN primitives share (convolution, matmul): the engine, a cache
// of primitives by key, and running one with a scratchpad from the device's allocator.
//
// Primitives are cached by (op, shape, thread count): making one costs milliseconds (its JIT
// kernel and blocking depend on the shape and on the OpenMP thread count it is created under).
// Each cache is shared by all devices behind a mutex. Primitives use the "user" scratchpad mode,
// which makes one primitive safe to run from several threads at once: each call gets its own
// scratchpad, from the device's allocator so it shows in the memory accounting.
#include <oneapi/dnnl/dnnl.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "engine/core/backend.h"

namespace pt::cpu {

dnnl::engine& dnnl_engine();

// An attribute with the scratchpad mode every cached primitive uses.
dnnl::primitive_attr user_scratchpad();

struct DnnlPrimitive {
  dnnl::primitive primitive;
  size_t scratchpad_bytes = 0;
  dnnl::memory::desc scratchpad;
};

template <class PrimitiveDesc, class Primitive>
std::shared_ptr<const DnnlPrimitive> wrap_primitive(const PrimitiveDesc& pd) {
  auto p = std::make_shared<DnnlPrimitive>();
  p->primitive = Primitive(pd);
  p->scratchpad = pd.scratchpad_desc();
  p->scratchpad_bytes = p->scratchpad.get_size();
  return p;
}

// The primitive for `key`, made by `create` on first use. When oneDNN refuses, throws
// runtime_error "<what>: oneDNN could not make a primitive for <describe()>: <reason>".
template <class Key, class Hash>
class PrimitiveCache {
 public:
  std::shared_ptr<const DnnlPrimitive> get(
      const Key& key, const std::function<std::shared_ptr<const DnnlPrimitive>()>& create,
      const char* what, const std::function<std::string()>& describe) {
    std::lock_guard lock(mutex_);
    auto& slot = cache_[key];
    if (!slot) {
      try {
        slot = create();
      } catch (const dnnl::error& e) {
        cache_.erase(key);
        throw std::runtime_error(std::string(what) + ": oneDNN could not make a primitive for " +
                                 describe() + ": " + e.what());
      }
    }
    return slot;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<Key, std::shared_ptr<const DnnlPrimitive>, Hash> cache_;
};

// Runs the primitive on the calling thread's OpenMP pool with a scratchpad of its own.
void execute(Backend& backend, const DnnlPrimitive& p, std::unordered_map<int, dnnl::memory> args);

// A memory object over our pointer (oneDNN takes a non-const handle even for inputs; it does
// not write them).
dnnl::memory wrap_memory(const dnnl::memory::desc& desc, const void* ptr);

// Device memory for the duration of one call, returned on scope exit.
class Scratch {
 public:
  Scratch(Backend& backend, size_t bytes)
      : backend_(backend), bytes_(bytes), ptr_(backend.allocate(bytes)) {}
  ~Scratch() { backend_.deallocate(ptr_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }

 private:
  Backend& backend_;
  size_t bytes_;
  void* ptr_;
};

}  // namespace pt::cpu
