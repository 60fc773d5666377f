#pragma once
// Where the partitioner's layer costs come from, parsed once from its text form:
//   estimate  from FLOPs and bytes (estimate_costs; no device needed)
//   profile   by timing every layer on a device (profile_costs)
#include <string>
#include <string_view>

namespace pt {

struct CostSource {
  enum class Kind { estimate, profile };
  Kind kind = Kind::estimate;

  // Throws UsageError naming the valid forms.
  static CostSource parse(std::string_view text);
  std::string str() const;  // "estimate" | "profile"
  bool operator==(const CostSource&) const = default;
};

}  // namespace pt
