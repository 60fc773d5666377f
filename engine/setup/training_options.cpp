#include "engine/setup/training_options.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/io/output_path.h"

namespace pt {

void TrainingOptions::check(int64_t batch) const {
  if (microbatches < 1) throw UsageError("--microbatches must be >= 1");
  if (dp < 1) throw UsageError(fmt::format("--dp {} must be >= 1", dp));
  if (!(bucket_mib > 0)) throw UsageError(fmt::format("--bucket-mb {} must be > 0", bucket_mib));
  if (microbatches > batch)
    throw UsageError(
        fmt::format("--microbatches {} is more than the --batch of {} samples: every "
                    "micro-batch needs at least one sample",
                    microbatches, batch));
  if (static_cast<int64_t>(microbatches) * dp > batch)
    throw UsageError(
        fmt::format("--dp {} x --microbatches {} is more than the --batch of {} samples: every "
                    "micro-batch of every replica needs at least one sample",
                    dp, microbatches, batch));
  check_output_path(trace, "--trace");
  check_output_path(timeline, "--timeline");
}

bool TrainingOptions::pipelined() const {
  return force_pipeline || stages > 1 || schedule.kind == ScheduleChoice::Kind::file ||
         !trace.empty() || !timeline.empty() || plan_only || dp > 1;
}

}  // namespace pt
