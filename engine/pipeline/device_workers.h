#pragma once
// One persistent thread per device. run_on_all(job) runs job(d) on every device's thread at
// once and returns when all are done, rethrowing the first failure (a failure raises the shared
// abort flag, so the others' waits end instead of hanging). Threads persist so each keeps its
// OpenMP pool, sized for its device by Backend::bind_current_thread().
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/core/backend.h"

namespace pt {

class DeviceWorkers {
 public:
  explicit DeviceWorkers(std::vector<Backend*> devices);
  ~DeviceWorkers();
  DeviceWorkers(const DeviceWorkers&) = delete;
  DeviceWorkers& operator=(const DeviceWorkers&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }

  // Runs job(d) for every device d on its own thread; rethrows the first exception (other
  // than Aborted) after all jobs ended. `on_failure` runs once, on the failing thread, right
  // after the first failure (e.g. to wake waiters).
  void run_on_all(const std::function<void(int)>& job,
                  const std::function<void()>& on_failure = {});

  const std::atomic<bool>& abort_flag() const { return abort_; }

 private:
  void loop(int d);

  std::vector<Backend*> devices_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* job_ = nullptr;
  const std::function<void()>* on_failure_ = nullptr;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::atomic<bool> abort_{false};
};

}  // namespace pt
