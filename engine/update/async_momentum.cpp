#include "engine/update/async_momentum.h"

namespace pt {

namespace {

bool has_momentum(const OptimizerConfig& o) {
  return o.kind == "adamw" || (o.kind == "sgd" && o.momentum > 0.f && o.dampening == 0.f);
}

}  // namespace

OptimizerConfig async_optimizer(OptimizerConfig given, AsyncMomentum momentum) {
  if (momentum == AsyncMomentum::lookahead && has_momentum(given)) given.nesterov = true;
  return given;
}

}  // namespace pt
