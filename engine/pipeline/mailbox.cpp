#include "engine/pipeline/mailbox.h"

namespace pt {

namespace {
// Waits are sliced so a raised abort flag is noticed promptly even without a notify.
constexpr auto kSlice = std::chrono::milliseconds(50);
}  // namespace

bool Mailbox::put(const MessageKey& key, Tensor value, Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  while (messages_.size() >= capacity_) {
    if (abort_ && abort_->load()) throw Aborted();
    if (Clock::now() >= deadline) return false;
    changed_.wait_until(lock, std::min(deadline, Clock::now() + kSlice));
  }
  messages_[key] = std::move(value);
  changed_.notify_all();
  return true;
}

Tensor Mailbox::take(const MessageKey& key, Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  while (true) {
    auto it = messages_.find(key);
    if (it != messages_.end()) {
      Tensor t = std::move(it->second);
      messages_.erase(it);
      changed_.notify_all();
      return t;
    }
    if (abort_ && abort_->load()) throw Aborted();
    if (Clock::now() >= deadline) return Tensor();
    changed_.wait_until(lock, std::min(deadline, Clock::now() + kSlice));
  }
}

void Mailbox::notify_all() {
  std::lock_guard lock(mutex_);
  changed_.notify_all();
}

void Mailbox::reset(size_t capacity) {
  std::lock_guard lock(mutex_);
  messages_.clear();
  capacity_ = capacity;
  changed_.notify_all();
}

}  // namespace pt
