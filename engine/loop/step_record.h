#pragma once
// What every training loop does around a window of steps, the same in fit() and pipetrain-gpt's
// own loop: the window trained and timed (its steps share its time evenly), and for each step a
// skipped step (non-finite gradients) said on stderr and one metrics line.
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/report/metrics.h"
#include "engine/train/training_engine.h"

namespace pt {

struct TimedSteps {
  std::vector<StepStats> stats;
  double seconds = 0;  // the whole window
  double step_seconds() const { return seconds / static_cast<double>(stats.size()); }
};

// engine.train_steps(batches) with its wall time.
TimedSteps train_timed(TrainingEngine& engine, std::span<const HostBatch> batches);

// Step `step_done` (1-based: the steps taken so far) ended with `st` after `step_s` seconds:
// the metrics line is step, `extra` (e.g. the epoch), loss, lr, grad_norm, `rate_name`
// (units_per_step / step_s), reserved_bytes, rss_bytes.
void record_step(MetricsWriter& metrics, const StepStats& st, int64_t step_done, double step_s,
                 const std::string& rate_name, double units_per_step,
                 const std::vector<std::pair<std::string, MetricValue>>& extra = {});

}  // namespace pt
