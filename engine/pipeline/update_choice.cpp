#include "engine/pipeline/update_choice.h"

#include "engine/update/async_update.h"
#include "engine/update/flush_update.h"
#include "engine/update/full_shard_update.h"
#include "engine/update/ps_update.h"
#include "engine/update/sharded_update.h"

namespace pt {

std::unique_ptr<UpdateStrategy> make_update_strategy(const PipelineConfig& config,
                                                     const UpdateContext& context, int64_t step) {
  const ParallelContext& par = config.parallel;
  // The sharded optimizer's own precondition first (--dp R >= 2), as before any other mode's.
  if (par.shard_optimizer && !config.async_update) return std::make_unique<ShardedUpdate>(context);
  if (par.shard_full && !config.async_update)
    return std::make_unique<FullShardUpdate>(
        context, FullShardConfig{par.shard_unit_layers, par.reshard_after_forward,
                                 par.shard_prefetch, par.shard_reduce_every_microbatch});
  if (config.async_update)
    return std::make_unique<AsyncUpdate>(context, config.async_window, config.async_delay, step);
  if (par.uses_parameter_server()) return std::make_unique<ParameterServerUpdate>(context);
  return std::make_unique<FlushUpdate>(context);
}

}  // namespace pt
