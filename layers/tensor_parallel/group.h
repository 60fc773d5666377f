#pragma once
// The ranks that share the layers of one pipeline stage (tensor parallelism, Megatron-LM's
// "tensor-model-parallel group"), as the layers see them: collectives on device memory, called
// inside forward and backward. The engine implements it over its communicators
// (engine/parallel/tensor_parallel_group.h: in-process, MPI, NCCL); layers never see which.
//
// Rules (those of engine/comm/communicator.h): every rank calls the same collectives in the
// same order with the same sizes; a sum has the same bits on every rank; nothing waits forever
// (a blocking call throws TimeoutError naming `what` and the rank it waited for).
//
// Collectives can also be started and waited for later (start_*), so that a layer computes
// meanwhile what does not depend on them: Megatron-LM's asynchronous all-reduce of a
// column-parallel layer's input gradient, overlapped with its weight gradient. Started and
// blocking calls of one device run in the order they were made, on every rank alike.
#include <cstdint>
#include <memory>
#include <string_view>

#include "engine/core/backend.h"

namespace pt {

// A collective in flight: its buffers are its own until wait() returns, when the result is in
// place. wait() throws what the collective threw (a TimeoutError naming the rank it waited
// for...); it never waits forever, as the collective itself gives up after the group's timeout.
// Destroying one that was not waited for waits for it (and swallows its error).
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
};

// One that is done already (a group that runs every collective where it is started).
class CompletedCollective final : public PendingCollective {
 public:
  void wait() override {}
};

class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data (n floats of `backend`'s memory) := the element-wise sum over the ranks.
  virtual void all_reduce_sum(Backend& backend, float* data, int64_t n, std::string_view what) = 0;
  // in: n floats on every rank; out: size() * n, rank r's at offset r * n.
  virtual void all_gather(Backend& backend, const float* in, float* out, int64_t n,
                          std::string_view what) = 0;
  // in: size() * n floats; out: n = the element-wise sum over the ranks of block rank().
  virtual void reduce_scatter_sum(Backend& backend, const float* in, float* out, int64_t n,
                                  std::string_view what) = 0;

  // The same three, started. The defaults run the collective here and return it completed: a group
  // that cannot overlap needs nothing more.
  virtual std::unique_ptr<PendingCollective> start_all_reduce_sum(Backend& backend, float* data,
                                                                  int64_t n,
                                                                  std::string_view what) {
    all_reduce_sum(backend, data, n, what);
    return std::make_unique<CompletedCollective>();
  }
  virtual std::unique_ptr<PendingCollective> start_all_gather(Backend& backend, const float* in,
                                                              float* out, int64_t n,
                                                              std::string_view what) {
    all_gather(backend, in, out, n, what);
    return std::make_unique<CompletedCollective>();
  }
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter_sum(Backend& backend,
                                                                      const float* in, float* out,
                                                                      int64_t n,
                                                                      std::string_view what) {
    reduce_scatter_sum(backend, in, out, n, what);
    return std::make_unique<CompletedCollective>();
  }
};

// Which rank of how many a layer is built for, and the group it talks to. The default (one
// rank, no group) is a layer as written: no split, no collective.
struct TensorParallel {
  TensorParallelGroup* group = nullptr;  // required when size > 1
  int rank = 0;
  int size = 1;
  // Sequence parallelism (Korthikanti et al. 2022): between the tensor-parallel regions the
  // activations are split along the sequence (all-gather / reduce-scatter instead of the
  // all-reduce); only where a layer supports it.
  bool sequence_parallel = false;

  bool enabled() const { return size > 1; }
  // Whether a layer built with this splits its activations along the sequence.
  bool splits_sequence() const { return sequence_parallel && enabled(); }
};

}  // namespace pt
