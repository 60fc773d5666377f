#include "engine/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

float LrSchedule::at(int64_t step) const {
  if (step < warmup_steps)
    return base_lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  if (kind == Kind::constant) return base_lr;
  const int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
  const double t =
      std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(span));
  return static_cast<float>(min_lr +
                            (base_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * t)));
}

LrSchedule::Kind LrSchedule::parse_kind(const std::string& text) {
  if (text == "constant") return Kind::constant;
  if (text == "cosine") return Kind::cosine;
  throw UsageError(
      fmt::format("unknown learning-rate schedule '{}': use constant or cosine", text));
}

}  // namespace pt
