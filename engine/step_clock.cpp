#include "engine/step_clock.h"

#include <algorithm>

namespace pt {

void StepClock::record(int64_t step, int64_t batch, double seconds) {
  if (step == 0 || batch < batch_) return;
  if (batch > batch_) seconds_.clear(), next_ = 0;  // a larger batch: the old ones were partial
  batch_ = batch;
  if (seconds_.size() < kRecent)
    seconds_.push_back(seconds);
  else
    seconds_[next_] = seconds;
  next_ = (next_ + 1) % kRecent;
}

double StepClock::median_seconds() const {
  if (seconds_.empty()) return 0;
  std::vector<double> v = seconds_;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace pt
