#include "engine/partition/cost_source.h"

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

CostSource CostSource::parse(std::string_view text) {
  if (text == "estimate") return {Kind::estimate};
  if (text == "profile") return {Kind::profile};
  throw UsageError(fmt::format("unknown --costs '{}': use estimate or profile", text));
}

std::string CostSource::str() const { return kind == Kind::profile ? "profile" : "estimate"; }

}  // namespace pt
