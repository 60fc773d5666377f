#include "engine/report/step_clock.h"

#include "engine/report/median.h"

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

double StepClock::median_seconds() const { return median_of(seconds_); }

}  // namespace pt
