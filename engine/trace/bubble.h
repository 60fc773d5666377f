#pragma once
// The pipeline bubble of one step, measured from a trace.
//
// Definition (per device d, one step):
//   busy_us[d]         sum of the durations of d's COMPUTE actions (F, B, I, W) in the step.
//                      Communication (SEND_*, RECV_*), and REDUCE_GRAD are not compute: time
//                      spent in them counts as bubble, which is what overlapping them should save.
//   step_span_us       from the earliest start to the latest end over all devices' events of
//                      the step (all action types): the wall time of the step.
//   bubble_fraction[d] 1 - busy_us[d] / step_span_us: the share of the step d spent not
//                      computing. 0 when the step span is 0.
//   span_us[d]         d's own span, from its first start to its last end in the step (0 when
//                      d ran nothing); informative only, it does not enter bubble_fraction.
//
// With uniform F and B times and free communication this equals the analytic GPipe / 1F1B
// bubble (D - 1) / (M + D - 1) on every device (D devices, M micro-batches): the step lasts
// (M + D - 1)(t_F + t_B) and each device computes M(t_F + t_B) of it. The benchmarks compare the
// two; a measured value above the analytic one is time lost to communication, imbalance or
// overhead. Overlapping compute events on one device would be counted twice (the runtime runs a
// device's actions one at a time, so a real trace has none).
#include <vector>

#include "engine/trace/trace.h"

namespace pt {

struct BubbleStats {
  std::vector<double> busy_us, span_us, bubble_fraction;  // per device, size D
  double step_span_us = 0;

  // Mean of bubble_fraction over the devices: one number for a whole pipeline.
  double mean_bubble_fraction() const;
};

// Throws UsageError when the trace has no event of `step` (the message lists the steps it has).
BubbleStats measure_bubble(const Trace& trace, int step);

}  // namespace pt
