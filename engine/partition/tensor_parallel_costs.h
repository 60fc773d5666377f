#pragma once
// One tensor-parallel rank's layer costs for any model that declares its split (--plan auto over
// T; pipetrain-plan's GPT has its own, gpt_costs.h): compute and memory from the rank's shard
// (shard_model), and the all-reduces each layer waits for counted by running it once on one
// sample with a group that moves nothing and counts (no formula per layer kind to keep in step
// with the layers).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/core/backend.h"
#include "engine/partition/sharded_costs.h"
#include "layers/model.h"

namespace pt {

class TensorParallelCosts {
 public:
  // make_model(): the model as written; T > 1 tensor ranks. Throws ShapeError (from
  // shard_model) when the model does not split T ways. `device` runs the counting pass, on
  // the first costs() (a run planned on the shard's model() needs none).
  TensorParallelCosts(const std::function<Model()>& make_model, int T, Backend& device);
  ~TensorParallelCosts();

  int ranks() const;
  // Rank 0's model (its layers hold slices; their collectives move nothing), and another like it
  // (a profiler's copy per device).
  const Model& model() const;
  Model make_shard() const;
  // Rank 0's costs for micro-batches of `microbatch` samples (estimated from FLOPs and bytes,
  // as estimate_costs), with the all-reduce bytes per call and the calls of F and of I.
  ShardedCosts costs(int64_t microbatch);

 private:
  void count_collectives();

  struct Parts;
  std::unique_ptr<Parts> parts_;
};

}  // namespace pt
