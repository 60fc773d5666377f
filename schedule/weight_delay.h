#pragma once
// How old the weights are that an asynchronous window's compute actions can run with, read off
// the action lists (the schedule decides the order; the runtime binds the version it allows).
// Step t's micro-batches compute with W(t - d), the weights UPDATE(t - d - 1) wrote, so on the
// stage's device that UPDATE must come before every compute action (F, B, I, W) of step t. The
// least such d of a stage is the largest (step of a compute action) - (the stage's UPDATEs run
// before it) over its list. For one_f_one_b_async (M >= D - 1): 0 on the last stage, whose
// backward of a micro-batch follows its forward at once, and 1 on every other stage.
#include "schedule/schedule.h"

namespace pt::sched {

int least_weight_delay(const Schedule& s, int stage);

}  // namespace pt::sched
