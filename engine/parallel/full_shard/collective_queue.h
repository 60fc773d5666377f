#pragma once
// One thread that runs a device's full-sharding collectives in the order they were submitted:
// a gather submitted ahead of its use (prefetch) runs while the device's worker computes, and
// every collective of the device's groups is issued by this one thread, in one order that is
// the same on every replica (the submissions follow the schedule), as MPI and our in-process
// groups need. The worker waits for a job's ticket only when it needs the result.
//
// Jobs must not touch what the worker mutates (StageParameters' units): they get the tensors
// they fill when submitted. A job's exception is kept and rethrown by wait() or drain(); the
// jobs after it do not run (their collectives would wait for a peer that already failed).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace pt {

class CollectiveQueue {
 public:
  using Ticket = uint64_t;

  CollectiveQueue();
  ~CollectiveQueue();
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  Ticket submit(std::function<void()> job);
  bool done(Ticket ticket);
  // Blocks until the job has run; rethrows the first failure.
  void wait(Ticket ticket);
  void drain();

  // Seconds the jobs ran, and of that the time wait()/drain() blocked (not hidden behind the
  // worker's compute), since the last take_times().
  struct Times {
    double busy_s = 0, waited_s = 0;
  };
  Times take_times();

 private:
  using Clock = std::chrono::steady_clock;
  void loop();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;
  Ticket submitted_ = 0, finished_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  Times times_;
  std::thread thread_;
};

}  // namespace pt
