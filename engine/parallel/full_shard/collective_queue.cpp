#include "engine/parallel/full_shard/collective_queue.h"

namespace pt {

CollectiveQueue::CollectiveQueue() : thread_([this] { loop(); }) {}

CollectiveQueue::~CollectiveQueue() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

CollectiveQueue::Ticket CollectiveQueue::submit(std::function<void()> job) {
  std::lock_guard lock(mutex_);
  jobs_.push_back(std::move(job));
  changed_.notify_all();
  return ++submitted_;
}

bool CollectiveQueue::done(Ticket ticket) {
  std::lock_guard lock(mutex_);
  return finished_ >= ticket || error_;
}

void CollectiveQueue::wait(Ticket ticket) {
  const auto t0 = Clock::now();
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return finished_ >= ticket || error_; });
  times_.waited_s += std::chrono::duration<double>(Clock::now() - t0).count();
  if (error_) std::rethrow_exception(error_);
}

void CollectiveQueue::drain() {
  Ticket last = 0;
  {
    std::lock_guard lock(mutex_);
    last = submitted_;
  }
  wait(last);
}

CollectiveQueue::Times CollectiveQueue::take_times() {
  std::lock_guard lock(mutex_);
  const Times out = times_;
  times_ = {};
  return out;
}

void CollectiveQueue::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || (!jobs_.empty() && !error_); });
    if (stop_) return;
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    std::exception_ptr failure;
    const auto t0 = Clock::now();
    try {
      job();
    } catch (...) {
      failure = std::current_exception();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    lock.lock();
    times_.busy_s += seconds;
    if (failure && !error_) error_ = failure;
    ++finished_;
    changed_.notify_all();
  }
}

}  // namespace pt
