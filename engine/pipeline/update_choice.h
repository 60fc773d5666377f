#pragma once
// The one place that turns a PipelineConfig's update mode into the update strategy
// (engine/update/update_strategy.h) the pipeline trainer calls.
#include <memory>

#include "engine/pipeline/pipeline_config.h"
#include "engine/update/update_strategy.h"

namespace pt {

// `step`: the trainer's step now (the asynchronous update numbers its weight versions by it).
std::unique_ptr<UpdateStrategy> make_update_strategy(const PipelineConfig& config,
                                                     const UpdateContext& context, int64_t step);

}  // namespace pt
