#pragma once
// Where a layer's parameters are whole while the executor runs it: the piece the executor calls
// around every layer's compute, so that full sharding (--shard full, engine/parallel/full_shard/)
// can gather a unit's parameters just before they are used, drop them right after and
// reduce-scatter its gradients once they are final, without a branch in the executor. Without
// one (nullptr) every parameter is always whole, as in every other mode.
//
// Called by the device's worker (one thread), in the order of its action list: every replica
// makes the same calls in the same order, so collectives made inside them match.
namespace pt {

class ParameterResidency {
 public:
  // Which computation is about to run: a forward, the recomputation of one inside a backward
  // action, or a backward (input gradient, weight gradient or both).
  enum class Pass { forward, recompute, backward };

  virtual ~ParameterResidency() = default;
  // Before layer `layer` of stage `stage` computes; `weight_gradient`: the computation writes
  // the layer's parameter gradients.
  virtual void before_compute(int stage, int layer, Pass pass, bool weight_gradient) = 0;
  // After the layer's forward (not after a recomputation: its backward follows).
  virtual void after_forward(int stage, int layer) = 0;
  // After the layer's part of a backward action: its input gradient, its weight gradient or
  // both. `final`: the weight gradient was the stage's last of the step (the gradients are
  // complete).
  virtual void after_backward(int stage, int layer, bool weight_gradient, bool final) = 0;
  // After the device's list: nothing of this run is left to do (e.g. parameters gathered for
  // an evaluation pass are dropped).
  virtual void finish_run() {}
};

}  // namespace pt
