#pragma once
// The gradient step of tied parameters (Model::ties): before the optimizer step, every tie's
// copies get the sum of their gradients, added in member order (owner first), so every copy
// takes the same update and the copies stay bit-identical — on one device (Trainer), across
// devices of one process, and across processes (over the pipeline communicator). The single
// device and the pipeline add in the same order, so their results are the same bits.
#include <functional>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/train/stage_parameters.h"

namespace pt {

// `stages`: the stage parameters this process holds. `group` (nullable when every copy is held
// here): the pipeline communicator, rank = schedule device; `device_of_layer(l)` names the
// device holding layer l (needed with `group`).
void sum_tied_gradients(const Model& model, const std::vector<StageParameters*>& stages,
                        Communicator* group = nullptr,
                        const std::function<int(int layer)>& device_of_layer = {});

}  // namespace pt
