#pragma once
// The executor's hooks for full sharding on one device (engine/parallel/parameter_residency.h):
// a unit is gathered before its first layer computes, dropped after its forward (unless
// reshard_after_forward is off, then at the step's end) and after its backward, and its
// gradients are reduce-scattered when the stage's last weight gradient of the step has passed
// the unit's first layer.
//
// With prefetch (FullShardConfig::prefetch, --shard-prefetch true) every collective of the device
// runs on its CollectiveQueue's thread, in the order the hooks submit them: when a unit is needed
// in a forward, the next unit's gather is submitted at once (in a backward, the previous unit's),
// so it runs while this unit computes, as FSDP2 prefetches; a reduce-scatter is submitted and not
// waited for (its unit's whole gradient is dropped once it has run). Without prefetch each
// collective runs on the worker when needed.
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "engine/parallel/full_shard/collective_queue.h"
#include "engine/parallel/full_shard/unit_shards.h"
#include "engine/parallel/gradient_reducer.h"
#include "engine/parallel/parameter_residency.h"

namespace pt {

class FullShardResidency final : public ParameterResidency {
 public:
  // The stages this device holds, by stage index; all share one FullShardConfig.
  FullShardResidency(std::map<int, UnitShards*> stages, const FullShardConfig& config);

  void before_compute(int stage, int layer, Pass pass, bool weight_gradient) override;
  void after_forward(int stage, int layer) override;
  void after_backward(int stage, int layer, bool weight_gradient, bool final) override;
  void finish_run() override;

  // The last run's collectives: how many, their time, and the part of it the worker waited for.
  // publish() keeps them as the last step's (called by a training step's end: evaluation runs
  // in between do not replace them).
  void publish() { step_stats_ = stats_; }
  ReductionStats last_step_stats() const { return step_stats_; }

 private:
  UnitShards& shards(int stage) const;
  // Unit u of the stage whole on return (waiting for its prefetch, or gathering it now).
  void ensure(int stage, size_t u);
  void prefetch(int stage, size_t u);
  // Drops the whole gradients of the units whose reduce-scatter has run (all of them: `all`).
  void reap(bool all);
  // Waits for a pending reduce-scatter of unit u, and drops its whole gradient.
  void settle(int stage, size_t u);
  // Runs a collective on the worker (no prefetch), counting its time as exposed.
  void timed(const std::function<void()>& collective);

  std::map<int, UnitShards*> stages_;
  FullShardConfig config_;
  std::unique_ptr<CollectiveQueue> queue_;                             // with prefetch
  std::map<std::pair<int, size_t>, CollectiveQueue::Ticket> gathers_;  // submitted, not waited
  struct PendingReduce {
    int stage;
    size_t unit;
    CollectiveQueue::Ticket ticket;
  };
  std::vector<PendingReduce> reduces_;
  int collectives_ = 0;
  double exposed_s_ = 0;  // without prefetch: the collectives' time this run
  ReductionStats stats_, step_stats_;
};

}  // namespace pt
