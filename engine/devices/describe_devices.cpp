#include "engine/devices/describe_devices.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pt {

std::string join_device_descriptions(const std::vector<std::string>& descriptions) {
  if (descriptions.size() <= 1) return descriptions.empty() ? "" : descriptions[0];
  std::vector<std::string> names;
  std::string shared_details;
  bool same = true;
  for (const std::string& d : descriptions) {
    const size_t open = d.find(" (");
    const bool has_details = open != std::string::npos && d.back() == ')';
    const std::string details = has_details ? d.substr(open + 2, d.size() - open - 3) : "";
    if (names.empty()) shared_details = details;
    same = same && has_details && details == shared_details;
    names.push_back(has_details ? d.substr(0, open) : d);
  }
  if (same) return fmt::format("{} (each {})", fmt::join(names, ", "), shared_details);
  return fmt::format("{}", fmt::join(descriptions, ", "));
}

std::string describe_devices(const std::vector<Backend*>& devices) {
  std::vector<std::string> descriptions;
  for (const Backend* b : devices) descriptions.push_back(b->describe());
  return join_device_descriptions(descriptions);
}

}  // namespace pt
