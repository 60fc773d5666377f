#include "engine/parallel/gradient_reducer.h"

#include "engine/parallel/all_reduce_gradients.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

#include <fmt/format.h>

namespace pt {

namespace {
constexpr int kReducerNice = 10;
}  // namespace

GradientReducer::GradientReducer(Communicator& group,
                                 const std::vector<std::pair<int, StageParameters*>>& stages,
                                 size_t bucket_bytes)
    : group_(group) {
  for (const auto& [stage, params] : stages) {
    grads_[stage] = params->grads_flat().numel() ? params->grads_flat().f32() : nullptr;
    backends_[stage] = &params->backend();
    for (GradientBucket& b : plan_gradient_buckets(*params, stage, bucket_bytes)) {
      for (int layer : b.layers) bucket_of_[{stage, layer}] = buckets_.size();
      buckets_.push_back(std::move(b));
    }
  }
  remaining_.assign(buckets_.size(), 0);
  launched_.assign(buckets_.size(), true);
  thread_ = std::thread([this] { loop(); });
}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void GradientReducer::start_step() {
  std::lock_guard lock(mutex_);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    remaining_[b] = static_cast<int>(buckets_[b].layers.size());
    launched_[b] = false;
  }
  queue_.clear();
  done_ = launched_count_ = 0;
  error_ = nullptr;
  reduce_s_ = 0;
  stats_ = ReductionStats{};
}

void GradientReducer::layer_done(int stage, int layer) {
  const auto it = bucket_of_.find({stage, layer});
  if (it == bucket_of_.end()) return;  // a layer without parameters
  if (--remaining_[it->second] == 0) launch(it->second);
}

void GradientReducer::flush(int stage) {
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (buckets_[b].stage == stage && !launched_[b]) launch(b);
}

void GradientReducer::launch(size_t bucket) {
  launched_[bucket] = true;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(bucket);
    ++launched_count_;
  }
  changed_.notify_all();
}

void GradientReducer::finish() {
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (!launched_[b]) launch(b);
  const auto wait_start = Clock::now();
  std::unique_lock lock(mutex_);
  // No deadline here: every all-reduce on the thread gives up after the group's timeout and
  // reports through error_, so this wait ends.
  changed_.wait(lock, [&] { return done_ == launched_count_ || error_; });
  if (error_) std::rethrow_exception(error_);
  stats_.buckets = static_cast<int>(buckets_.size());
  stats_.reduce_s = reduce_s_;
  stats_.exposed_s = buckets_.empty() || last_end_ < wait_start
                         ? 0.0
                         : std::chrono::duration<double>(last_end_ - wait_start).count();
}

void GradientReducer::loop() {
  // A device often has one core: this thread polls the network while the worker computes
  // backward on the same core. At a lower priority it takes the core only when the worker
  // does not want it (the scheduler still gives it a slice, so transfers keep moving), instead
  // of halving the worker's speed; when the worker waits in finish(), it has the core to itself.
  // (Linux: the nice value of one thread.)
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kReducerNice);
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || (!queue_.empty() && !error_); });
    if (stop_) return;
    const size_t b = queue_.front();
    queue_.pop_front();
    lock.unlock();
    const GradientBucket& bucket = buckets_[b];
    std::exception_ptr failure;
    const auto t0 = Clock::now();
    try {
      float* grads = grads_.at(bucket.stage) + bucket.offset;
      const std::string what =
          fmt::format("the gradient all-reduce of bucket {} (stage {}, layers {}..{})", b,
                      bucket.stage, bucket.layers.back(), bucket.layers.front());
      all_reduce_gradients(*backends_.at(bucket.stage), group_, grads, bucket.count, host_bucket_,
                           what);
    } catch (...) {
      failure = std::current_exception();
    }
    const auto t1 = Clock::now();
    lock.lock();
    reduce_s_ += std::chrono::duration<double>(t1 - t0).count();
    last_end_ = t1;
    if (failure && !error_) error_ = failure;
    ++done_;
    changed_.notify_all();
  }
}

}  // namespace pt
