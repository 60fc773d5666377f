#pragma once
// The actions a PipelineTrainer executed in one step, as a Trace (engine/trace) that can be
// written as a Chrome trace or an SVG timeline, or measured for its bubble.
#include <vector>

#include "engine/pipeline/pipeline_trainer.h"
#include "engine/trace/trace.h"

namespace pt {

// executed[d] = device d's actions (PipelineTrainer::last_trace()); device_names from devices,
// one per timeline (make_trace: UsageError otherwise).
Trace step_trace(const std::vector<std::vector<ExecutedAction>>& executed,
                 const std::vector<Backend*>& devices, int step);

}  // namespace pt
