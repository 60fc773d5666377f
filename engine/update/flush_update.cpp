#include "engine/update/flush_update.h"

#include <utility>

namespace pt {

FlushUpdate::FlushUpdate(const UpdateContext& context) : context_(context) {
  make_missing_optimizers(context_, optimizers_);
  const ParallelContext& par = context_.parallel;
  reducers_.resize(static_cast<size_t>(context_.num_devices));
  if (par.replicas < 2) return;
  for (int d = 0; d < context_.num_devices; ++d) {
    std::vector<std::pair<int, StageParameters*>> held;
    for (size_t s = 0; s < context_.stages.size(); ++s)
      if (context_.stage_device[s] == d && context_.stages[s])
        held.emplace_back(static_cast<int>(s), context_.stages[s]);
    Communicator* group = par.data_parallel_group(d);
    if (held.empty() || !group) continue;
    reducers_[static_cast<size_t>(d)] =
        std::make_unique<GradientReducer>(*group, held, par.bucket_bytes);
  }
}

void FlushUpdate::begin_step(int64_t /*step*/) {
  for (auto& r : reducers_)
    if (r) r->start_step();
}

GradientReducer* FlushUpdate::reducer(int device) {
  return reducers_.at(static_cast<size_t>(device)).get();
}

EpilogueResult FlushUpdate::end_step(int64_t /*step*/, const EpilogueConfig& epilogue) {
  std::vector<StageState> held;
  for (size_t s = 0; s < context_.stages.size(); ++s)
    if (context_.stages[s]) held.push_back({context_.stages[s], optimizers_[s].get()});
  return finish_step(*context_.model, held, epilogue);
}

}  // namespace pt
