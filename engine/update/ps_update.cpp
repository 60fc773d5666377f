#include "engine/update/ps_update.h"

#include "engine/parallel/parameter_server.h"

namespace pt {

// One stage per device (check_pipeline_config): each stage's worker pushes its own layers.
ParameterServerUpdate::ParameterServerUpdate(const UpdateContext& context) : context_(context) {
  full_.resize(context_.stages.size());
}

// Every held stage sends before any waits: a server may hold layers of several.
void ParameterServerUpdate::begin_step(int64_t step) {
  const ParallelContext& par = context_.parallel;
  std::vector<int> pulls;
  for (int s = 0; s < static_cast<int>(context_.stages.size()); ++s)
    if (PsClient* c = par.parameter_server(s))
      if (c->begin_step(*context_.stages[static_cast<size_t>(s)], optimizer(s), step))
        pulls.push_back(s);
  for (int s : pulls)
    par.parameter_server(s)->finish_pull(*context_.stages[static_cast<size_t>(s)]);
  // The optimizer existed only to carry a checkpoint's state to the servers (INIT, or a save's
  // FETCH): the servers hold it.
  for (auto& o : full_) o.reset();
}

// Every held stage pushes before any pulls, as above.
EpilogueResult ParameterServerUpdate::end_step(int64_t step, const EpilogueConfig& /*epilogue*/) {
  const ParallelContext& par = context_.parallel;
  const int S = static_cast<int>(context_.stages.size());
  for (int s = 0; s < S; ++s)
    if (PsClient* c = par.parameter_server(s))
      c->push_gradients(*context_.stages[static_cast<size_t>(s)], step);
  EpilogueResult end;
  for (int s = 0; s < S; ++s)
    if (PsClient* c = par.parameter_server(s)) {
      // Synchronous: every server sends the same global norm and skip; asynchronous: each its own.
      const EpilogueResult e = c->finish_pull(*context_.stages[static_cast<size_t>(s)]);
      end.grad_norm = e.grad_norm;
      end.skipped = end.skipped || e.skipped;
    }
  return end;
}

}  // namespace pt
