#pragma once
// What --update async does to the optimizer's momentum (--async-momentum).
//
// lookahead (the default): momentum in its look-ahead form, SGD's Nesterov momentum and AdamW's
//   (Dozat 2016, engine/core/op_params.h). For a gradient one step late its update adds at once
//   the momentum terms the delay withheld: for SGD it is exactly the "spike compensation" of
//   Kosson et al. 2021 ("Pipelined Backpropagation at Scale") for a delay of one step.
//   Measured (docs/update-strategies.md): with it the asynchronous pipeline's Fashion-MNIST
//   accuracy and GPT validation loss come close to the synchronous run's; with heavy-ball
//   momentum it lost 2-5 points.
// plain: the optimizer as configured (PipeDream-2BW's exact update, with --async-delay uniform).
// Optimizers without momentum (SGD with --momentum 0) are the same either way.
#include <string_view>

#include "engine/optim/optimizer.h"

namespace pt {

enum class AsyncMomentum {
  lookahead,
  plain,
};

// The flag's spelling: "lookahead" or "plain".
constexpr std::string_view async_momentum_name(AsyncMomentum m) {
  return m == AsyncMomentum::lookahead ? "lookahead" : "plain";
}

// The optimizer an asynchronous pipeline steps with, given the configured one.
OptimizerConfig async_optimizer(OptimizerConfig given, AsyncMomentum momentum);

}  // namespace pt
