#include "engine/comm/collective_thread.h"

#include <utility>

namespace pt {

void CollectiveThread::Work::wait() {
  std::unique_lock lock(mutex);
  finished.wait(lock, [&] { return done; });
  if (error) std::rethrow_exception(error);
}

CollectiveThread::~CollectiveThread() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<CollectiveThread::Work> CollectiveThread::start(std::function<void()> run) {
  auto work = std::make_shared<Work>();
  work->run = std::move(run);
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(work);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  changed_.notify_all();
  return work;
}

bool CollectiveThread::idle() {
  std::lock_guard lock(mutex_);
  return queue_.empty() && !running_;
}

void CollectiveThread::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    std::shared_ptr<Work> work = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      work->run();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard done(work->mutex);
      work->done = true;
      work->error = error;
    }
    work->finished.notify_all();
    lock.lock();
    running_ = false;
  }
}

}  // namespace pt
