#pragma once
// The data-parallel gradient reduction of one device (DDP-style): the stages this device holds
// are cut into gradient buckets; during the last micro-batch's backward the device's worker
// reports each layer whose weight gradient is final (layer_done), and a bucket whose layers are
// all final is all-reduced (sum) across the device's replicas on this reducer's own thread while
// the worker goes on with backward. REDUCE_GRAD(s) launches whatever of stage s is left;
// finish() waits for every bucket (the optimizer step needs them).
//
// Every replica launches its buckets in the same order (the schedule is the same data on every
// replica), so the collectives match across the group.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/parallel/gradient_buckets.h"

namespace pt {

// Where the reduction time went in the last step.
struct ReductionStats {
  int buckets = 0;
  double reduce_s = 0;   // time the all-reduces took in all
  double exposed_s = 0;  // of that, time finish() waited (not hidden behind backward)
  double hidden_fraction() const {
    return reduce_s > 0 && exposed_s < reduce_s ? 1.0 - exposed_s / reduce_s : 0.0;
  }
};

class GradientReducer {
 public:
  // `stages`: (stage index, its parameters) for every stage this device holds.
  GradientReducer(Communicator& group, const std::vector<std::pair<int, StageParameters*>>& stages,
                  size_t bucket_bytes);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Called by the device's worker (one thread).
  void start_step();
  void layer_done(int stage, int layer);
  void flush(int stage);
  // Called after the worker finished its list: launches what is left, waits for all buckets and
  // rethrows the first failure (e.g. a TimeoutError naming the replica that did not arrive).
  void finish();

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  ReductionStats last_stats() const { return stats_; }

 private:
  using Clock = std::chrono::steady_clock;
  void launch(size_t bucket);
  void loop();

  Communicator& group_;
  std::vector<GradientBucket> buckets_;
  std::map<int, float*> grads_;       // stage -> its flat gradient arena
  std::map<int, Backend*> backends_;  // stage -> the backend its gradients live on
  std::vector<float> host_bucket_;    // a bucket's host copy, when it must go through the host
  std::map<std::pair<int, int>, size_t> bucket_of_;  // (stage, layer) -> bucket
  std::vector<int> remaining_;                       // per bucket: layers not yet final this step
  std::vector<bool> launched_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<size_t> queue_;
  size_t done_ = 0, launched_count_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  double reduce_s_ = 0;
  Clock::time_point last_end_;
  ReductionStats stats_;
  std::thread thread_;
};

}  // namespace pt
