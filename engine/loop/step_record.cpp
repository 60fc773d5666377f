#include "engine/loop/step_record.h"

#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "engine/report/resident_memory.h"

namespace pt {

TimedSteps train_timed(TrainingEngine& engine, std::span<const HostBatch> batches) {
  const auto t0 = std::chrono::steady_clock::now();
  TimedSteps out;
  out.stats = engine.train_steps(batches);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

void record_step(MetricsWriter& metrics, const StepStats& st, int64_t step_done, double step_s,
                 const std::string& rate_name, double units_per_step,
                 const std::vector<std::pair<std::string, MetricValue>>& extra) {
  if (st.skipped)
    fmt::print(
        stderr,
        "\nstep {}: gradients are not finite (norm {}): step skipped, parameters unchanged\n",
        step_done - 1, st.grad_norm);
  if (!metrics.enabled()) return;
  std::vector<std::pair<std::string, MetricValue>> fields{{"step", step_done}};
  fields.insert(fields.end(), extra.begin(), extra.end());
  fields.insert(fields.end(), {{"loss", st.loss},
                               {"lr", static_cast<double>(st.lr)},
                               {"grad_norm", st.grad_norm},
                               {rate_name, units_per_step / step_s},
                               {"reserved_bytes", static_cast<int64_t>(st.reserved_bytes)},
                               {"rss_bytes", static_cast<int64_t>(resident_bytes())}});
  metrics.write(fields);
}

}  // namespace pt
