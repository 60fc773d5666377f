#pragma once
// The state of one stage as a trainer hands it out (to checkpoints, the step epilogue, text
// generation): its parameters and, where this process holds one, its optimizer. `optimizer` may
// be null (weights only: a sharded or parameter-server stage between saves).
#include "engine/optim/optimizer.h"
#include "engine/train/stage_parameters.h"

namespace pt {

struct StageState {
  StageParameters* params = nullptr;
  Optimizer* optimizer = nullptr;
};

}  // namespace pt
