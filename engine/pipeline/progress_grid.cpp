#include "engine/pipeline/progress_grid.h"

#include <fmt/format.h>

namespace pt {

std::string render_progress(const std::vector<DeviceProgress>& devices) {
  std::string out =
      "where each device was (the action in [brackets] is the one it was executing):\n";
  for (const DeviceProgress& d : devices) {
    if (!d.note.empty()) {
      out += fmt::format("  {}: {}\n", d.label, d.note);
      continue;
    }
    out += fmt::format("  {}:", d.label);
    for (int i = 0; i < static_cast<int>(d.actions.size()); ++i)
      out += fmt::format(fmt::runtime(i == d.position ? " [{}]" : " {}"),
                         d.actions[static_cast<size_t>(i)]);
    if (d.position >= static_cast<int>(d.actions.size())) out += "  (finished)";
    out += "\n";
  }
  return out;
}

}  // namespace pt
