#pragma once
// How a thread waiting for a communication polls, shared by the MPI and NCCL communicators: back
// to back while the operation is likely to finish soon (Open MPI advances a nonblocking
// collective only inside MPI calls, so each step of its schedule waits for our next MPI_Test),
// then with a yield between polls (the core goes to any computing thread that wants it), then
// sleeping between polls, so that a thread waiting for a slow peer does not take the core from
// a computing thread of the same process. The default sleep, 200 us, is at most 4% of the 5 ms
// already waited when sleeping starts, so a message arriving during a long wait is noticed
// little later, while an idle process (a parameter server between pushes, a fast replica
// waiting for a straggler) wakes about 4,000 times a second, not 15,000 as with 20 us (each
// wake takes a core from a computing process for a moment).
#include <chrono>
#include <thread>

namespace pt {

class Backoff {
 public:
  explicit Backoff(std::chrono::microseconds sleep = std::chrono::microseconds(200))
      : sleep_(sleep) {}

  // Call between two polls.
  void pause() {
    const auto waited = std::chrono::steady_clock::now() - start_;
    if (waited < kSpin) return;
    if (waited < kYield) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
  }

 private:
  static constexpr auto kSpin = std::chrono::microseconds(50);
  static constexpr auto kYield = std::chrono::milliseconds(5);
  std::chrono::microseconds sleep_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace pt
