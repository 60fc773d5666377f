#pragma once
// Test scaffolding for tensor-parallel layers: T ranks as threads of this process, each with its
// own CPU device and a tensor-parallel group over in-process communicators (the engine's own
// CommunicatorTensorParallelGroup, so the collectives are the ones training uses).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/backend.h"
#include "layers/layer.h"
#include "layers/tensor_parallel/group.h"

namespace pt::test {

class TpRanks {
 public:
  // `size` ranks; collectives give up after `timeout_s` (a test that skips one fails, not hangs).
  explicit TpRanks(int size, double timeout_s = 10);
  ~TpRanks();
  int size() const { return static_cast<int>(backends_.size()); }
  Backend& backend(int rank) const { return *backends_[static_cast<size_t>(rank)]; }
  // What a layer of rank `rank` is built with.
  TensorParallel tp(int rank, bool sequence_parallel = false) const;
  // Runs job(rank) on every rank at once (one thread each) and rethrows the first failure.
  void run(const std::function<void(int rank)>& job) const;

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<TensorParallelGroup>> groups_;
};

// Binds `layer`'s parameters to rank `shard`'s slices of the whole values `whole[i]` (one host
// vector per parameter of the unsharded layer, in param_specs() order; a replicated parameter
// takes the whole vector) and zeroed gradients, allocated on `be`. Returns the tensors.
struct BoundSlices {
  std::vector<Tensor> params, grads;
};
BoundSlices bind_slices(Layer& layer, Backend& be, const std::vector<std::vector<float>>& whole);

// The whole gradient of parameter i from every rank's slice (replicated: rank 0's), on the host.
std::vector<float> gather_whole(const std::vector<const Layer*>& rank_layers, size_t i,
                                const std::vector<Backend*>& backends);

// n values uniform in [lo, hi) from `seed`.
std::vector<float> uniform_values(uint64_t seed, int64_t n, float lo = -1.f, float hi = 1.f);
// Whole values for each parameter of `layer` (uniform in +-scale), one vector per parameter,
// in param_specs() order, shaped as the whole (unsplit) parameters.
std::vector<std::vector<float>> whole_params(const Layer& layer, uint64_t seed, float scale = 0.5f);

// One training micro-batch through a layer: forward x, backward_input dy, backward_weight dy
// (with `together`: Layer::backward, both at once). The layer is bound (bind_slices) to
// `params`; its gradients stay readable through the layer.
struct LayerRun {
  std::vector<float> y, dx;  // dx empty when the layer gives no input gradient
  BoundSlices bound;
  size_t saved_bytes = 0;  // what forward left in the context for backward (LayerContext)
};
LayerRun run_layer(Layer& layer, Backend& be, const std::vector<std::vector<float>>& params,
                   const Tensor& x, const std::vector<float>& dy, bool together = false);

}  // namespace pt::test
