#pragma once
// The wall time of a trainer's recent steps, to set beside a prediction of the whole step (the
// planner's, --plan auto): the median of the last 32 full-size steps (the largest batch seen: an
// epoch's smaller remainder is not compared with a prediction for a full batch), the trainer's
// first step excluded (first touches, primitive creation).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace pt {

class StepClock {
 public:
  // `step`: the trainer's step index (0 is skipped); `batch`: its samples.
  void record(int64_t step, int64_t batch, double seconds);
  double median_seconds() const;  // 0 before any

 private:
  static constexpr size_t kRecent = 32;
  std::vector<double> seconds_;  // a ring of the last kRecent
  size_t next_ = 0;
  int64_t batch_ = 0;
};

}  // namespace pt
