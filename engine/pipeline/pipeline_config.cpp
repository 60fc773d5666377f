#include "engine/pipeline/pipeline_config.h"

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

std::vector<int> check_pipeline_config(const PipelineConfig& config,
                                       const std::vector<Backend*>& devices,
                                       const PipelineLayout& layout) {
  const sched::Schedule& sc = config.schedule;
  const ParallelContext& par = config.parallel;
  if (sc.microbatches != config.trainer.microbatches)
    throw UsageError(fmt::format("the schedule is for {} micro-batches but --microbatches is {}",
                                 sc.microbatches, config.trainer.microbatches));
  if (!(config.timeout_s > 0))
    throw UsageError(fmt::format("--timeout {} must be > 0 seconds", config.timeout_s));
  if (par.replicas < 1 || par.replica < 0 || par.replica >= par.replicas)
    throw UsageError(fmt::format("replica {} of {} does not exist", par.replica, par.replicas));
  std::vector<int> held;
  for (int d = 0; d < sc.num_devices; ++d) {
    if (!devices[static_cast<size_t>(d)]) continue;
    held.push_back(d);
    if (par.replicas > 1 && !par.data_parallel_group(d) && !par.uses_parameter_server())
      throw UsageError(fmt::format("replica {} of {} has no data-parallel group for device {}",
                                   par.replica, par.replicas, d));
  }
  if (held.empty()) throw UsageError("none of the schedule's devices is held by this process");
  if (par.uses_parameter_server() && sc.num_devices != layout.num_stages())
    throw UsageError(fmt::format(
        "--ps needs one stage per device (each stage's worker pushes its own layers) but the "
        "schedule puts {} stages on {} devices: use --schedule 1f1b or gpipe",
        layout.num_stages(), sc.num_devices));
  if (static_cast<int>(held.size()) != sc.num_devices) {
    if (!par.pipeline_group)
      throw UsageError(
          "some schedule devices are in other processes (nullptr) but no pipeline communicator was "
          "given");
    if (par.pipeline_group->size() != sc.num_devices)
      throw UsageError(
          fmt::format("the pipeline communicator has {} ranks but the schedule has {} devices",
                      par.pipeline_group->size(), sc.num_devices));
  }
  return held;
}

}  // namespace pt
