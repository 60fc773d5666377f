#include "engine/pipeline/step_trace.h"

#include <string>
#include <utility>

namespace pt {

Trace step_trace(const std::vector<std::vector<ExecutedAction>>& executed,
                 const std::vector<Backend*>& devices, int step) {
  std::vector<std::string> names;
  for (const Backend* b : devices) names.push_back(b->device().str());
  return make_trace(std::move(names), executed, step);
}

}  // namespace pt
