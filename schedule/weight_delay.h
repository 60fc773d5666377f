#pragma once
// How old the weights are that an asynchronous window's compute actions can run with, read off
// the action lists (the schedule decides the order; the runtime binds the version it allows).
// Step t's micro-batches compute with W(t - d), the weights UPDATE(t - d - 1) wrote, so on the
// stage's device that UPDATE must come before every compute action (F, B, I, W) of step t. The
// least such d of a stage is the largest (step of a compute action) - (the stage's UPDATEs run
// before it) over its list. For one_f_one_b_async (M >= D - 1): 0 on the last stage, whose
// backward of a micro-batch follows its forward at once, and 1 on every other stage.
#include <vector>

#include "schedule/schedule.h"

namespace pt::sched {

int least_weight_delay(const Schedule& s, int stage);

// The same per micro-batch of a step (index 0 .. microbatches_per_step() - 1): the largest over
// the steps of (step) - (the stage's UPDATEs run before the micro-batch's forward), the version
// its backward then reuses. For one_f_one_b_async: 1 for the first D - 1 - stage micro-batches
// of a step, whose forwards run before the stage's previous UPDATE, and 0 for the others; the
// stage's least_weight_delay is the largest of them.
std::vector<int> least_microbatch_delays(const Schedule& s, int stage);

}  // namespace pt::sched
