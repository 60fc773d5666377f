#include "engine/pipeline/step_trace.h"

namespace pt {

Trace step_trace(const std::vector<std::vector<ExecutedAction>>& executed,
                 const std::vector<Backend*>& devices, int step) {
  Trace trace;
  for (const Backend* b : devices) trace.device_names.push_back(b->device().str());
  for (size_t d = 0; d < executed.size(); ++d)
    for (const ExecutedAction& e : executed[d])
      trace.events.push_back({static_cast<int>(d), e.action, e.start_us, e.end_us, step});
  return trace;
}

}  // namespace pt
