#pragma once
// Step 5 of assembling a run (training_run.h): the training engine for a planned pipeline. The
// replicas and their parallel groups (engine/replicas/: one process or one per process, with
// parameter servers or not); each pipeline replica makes its update strategy from the
// PipelineConfig (engine/pipeline/update_choice.h).
#include <functional>

#include "engine/comm/communicator.h"
#include "engine/pipeline/pipeline_config.h"
#include "engine/setup/training_run.h"

namespace pt {

// The PipelineConfig of `run`'s options and plan (trainer: the trainer's settings with M).
PipelineConfig pipeline_config(const TrainingRun& run, const TrainerConfig& trainer);

// Fills run.engine, run.pipeline and (--ps) the server's and workers' fields; prints what the
// update mode changes (unless !run.options.print).
void build_pipeline_engine(TrainingRun& run, const PipelineConfig& config, Model& model,
                           const std::function<Model()>& make_model, Communicator* world);

}  // namespace pt
