#pragma once
// A device's inbox for pipeline transfers inside one process: senders put tensors (already
// copied into this device's memory) under a key (stage, micro-batch, direction); the device's
// worker takes them in its schedule's order. Bounded (a sender waits when `capacity` messages
// are pending) and every wait has a deadline; an abort flag shared by all workers ends waits
// early when another worker failed, so nothing hangs.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "engine/core/tensor.h"

namespace pt {

enum class Direction : uint8_t { forward, backward };

struct MessageKey {
  int stage;  // the receiving stage
  int microbatch;
  Direction direction;
  int channel = 0;  // 0: the stage's input/output; 1 + k: skip connection k (Model::skip_edges)
  auto operator<=>(const MessageKey&) const = default;
};

// Thrown by a wait that ended because another worker failed (not itself the cause).
class Aborted : public std::runtime_error {
 public:
  Aborted() : std::runtime_error("aborted because another device failed") {}
};

class Mailbox {
 public:
  using Clock = std::chrono::steady_clock;

  Mailbox(size_t capacity, const std::atomic<bool>* abort) : capacity_(capacity), abort_(abort) {}

  // Returns false on timeout; throws Aborted when the abort flag is raised while waiting.
  bool put(const MessageKey& key, Tensor value, Clock::time_point deadline);
  // Returns an undefined Tensor on timeout; throws Aborted as put() does.
  Tensor take(const MessageKey& key, Clock::time_point deadline);
  // Wakes waiters so they notice the abort flag.
  void notify_all();
  // Drops everything (between runs, or after a failed one) and from now on holds at most
  // `capacity` messages.
  void reset(size_t capacity);

 private:
  size_t capacity_;
  const std::atomic<bool>* abort_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<MessageKey, Tensor> messages_;
};

}  // namespace pt
