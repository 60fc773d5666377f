#include "engine/update/async_update_limits.h"

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

void refuse_unsupported_with_async(float clip_norm, bool parity_check) {
  if (clip_norm > 0)
    throw UsageError(fmt::format(
        "--clip {} needs the global gradient norm, but --update async updates each stage on its "
        "own: pass --clip 0 or --update sync",
        clip_norm));
  if (parity_check)
    throw UsageError(
        "--parity-check compares with synchronous single-device training, which --update async "
        "does not compute (its step t uses the weights of step t - 1): drop one of them");
}

}  // namespace pt
