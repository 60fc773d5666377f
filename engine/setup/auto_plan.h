#pragma once
// --plan auto at the composition root: the user's options (devices, batch, optimizer, --mem-cap,
// --costs) -> the planner (engine/plan/planner.h) -> the options the user would have typed
// for the fastest plan, printed as flags so the run can be repeated without the search.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/backend.h"
#include "engine/optim/optimizer.h"
#include "engine/plan/planner.h"
#include "engine/setup/training_options.h"
#include "layers/model.h"

namespace pt {

struct AutoPlan {
  PlannerResult result;
  PlanCandidate chosen;
  TrainingOptions options;  // opt with the chosen stages, dp, microbatches, schedule, recompute,
                            // partition (layout:...) and plan_auto off
  std::string flags;        // the same as command-line flags
};

// Plans over `devices`, the run's own (open_devices_to_plan, run_devices.h: every device listed;
// with --costs profile it measures with the run's threads per device: the layers on every device
// at once, each with its own model from make_model() (empty: on the first device alone, with
// `model`), the step's epilogue with `optimizer` and the in-process all-reduce,
// step_overheads.h), searches, prints the table and the chosen flags (unless !opt.print). With
// --costs estimate the epilogue is estimated and the all-reduce stated. The chosen plan uses
// every device given (S x R = D), or one device with all their threads (chosen.threads > 0: the
// caller opens that one). Throws UsageError: what search_plans throws (a cap nothing fits,
// naming the smallest cap that would).
// The options that run `chosen` (given: the user's; chosen.threads > 0, one device with all the
// threads: the first of the devices given, `first`), and the same as flags. Full sharding is
// given explicitly as the planner priced it (units dropped after the forward, one reduce-scatter
// a step, no prefetch), not left to the runtime's auto choices, so that the run is the plan.
std::pair<TrainingOptions, std::string> options_for_plan(const TrainingOptions& given,
                                                         const PlanCandidate& chosen,
                                                         const ScheduleChoice& schedule,
                                                         const Backend& first);

AutoPlan plan_automatically(const TrainingOptions& opt, const std::vector<Backend*>& devices,
                            const Model& model, const std::function<Model()>& make_model,
                            const OptimizerConfig& optimizer, int64_t batch);

}  // namespace pt
