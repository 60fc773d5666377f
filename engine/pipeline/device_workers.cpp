#include "engine/pipeline/device_workers.h"

#include "engine/pipeline/mailbox.h"

namespace pt {

DeviceWorkers::DeviceWorkers(std::vector<Backend*> devices) : devices_(std::move(devices)) {
  for (int d = 0; d < size(); ++d) threads_.emplace_back([this, d] { loop(d); });
}

DeviceWorkers::~DeviceWorkers() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void DeviceWorkers::loop(int d) {
  devices_[static_cast<size_t>(d)]->bind_current_thread();
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int)>* job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    try {
      (*job)(d);
    } catch (const Aborted&) {
      // Another device failed first; its error is the one reported.
    } catch (...) {
      bool first = false;
      {
        std::lock_guard lock(mutex_);
        if (!error_) {
          error_ = std::current_exception();
          first = true;
        }
      }
      abort_ = true;
      if (first && on_failure_ && *on_failure_) (*on_failure_)();
    }
    {
      std::lock_guard lock(mutex_);
      if (--running_ == 0) done_.notify_all();
    }
  }
}

void DeviceWorkers::run_on_all(const std::function<void(int)>& job,
                               const std::function<void()>& on_failure) {
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    abort_ = false;
    error_ = nullptr;
    job_ = &job;
    on_failure_ = &on_failure;
    running_ = size();
    ++generation_;
    wake_.notify_all();
    done_.wait(lock, [&] { return running_ == 0; });
    job_ = nullptr;
    on_failure_ = nullptr;
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace pt
