#pragma once
// A thread that runs one caller's collectives in the order they were started, while the caller
// computes: how a device's tensor-parallel group overlaps a collective with the layer's other
// work (engine/parallel/tensor_parallel_group.h). One caller thread per CollectiveThread (a
// device's worker); the communicator it calls is used by nobody else while work is queued.
//
// Why a thread and not MPI's nonblocking collectives: the in-process communicator has none,
// and Open MPI advances a nonblocking collective only inside MPI calls (engine/comm/backoff.h),
// so a GEMM between MPI_Iallreduce and MPI_Wait would not overlap it. The work never waits
// forever: every collective gives up after its communicator's timeout and throws, and wait()
// rethrows that on the caller's thread.
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace pt {

class CollectiveThread {
 public:
  // A started piece of work; wait() returns when it ran, rethrowing what it threw.
  class Work {
   public:
    void wait();

   private:
    friend class CollectiveThread;
    std::function<void()> run;
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
    std::exception_ptr error;
  };

  CollectiveThread() = default;
  CollectiveThread(const CollectiveThread&) = delete;
  CollectiveThread& operator=(const CollectiveThread&) = delete;
  ~CollectiveThread();  // runs what is queued, then joins

  // Queues `run` after everything started before; the thread starts on the first call.
  std::shared_ptr<Work> start(std::function<void()> run);
  // Whether nothing is queued or running (a blocking call may then run on its caller's thread
  // without passing anything started before it).
  bool idle();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Work>> queue_;
  bool running_ = false;  // the thread is inside a piece of work
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pt
