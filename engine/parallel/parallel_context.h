#pragma once
// How one PipelineTrainer fits into a larger run: which data-parallel replica it is, which
// communicators reach the stages and replicas that live elsewhere (other threads of this
// process, or other processes). The defaults describe a plain single-process pipeline.
#include <cstddef>
#include <vector>

#include "engine/comm/communicator.h"

namespace pt {

class PsClient;  // engine/parallel/parameter_server.h

struct ParallelContext {
  int replicas = 1;  // R: pipeline replicas training on shards of every global batch
  int replica = 0;   // this one, in [0, R)
  // Set when some schedule devices run in other processes: group rank d is schedule device d,
  // and the devices this process does not hold are passed as nullptr.
  Communicator* pipeline_group = nullptr;
  // Per schedule device held here: its data-parallel group (the same device of every replica,
  // group rank = replica). Empty, or nullptr entries, when R == 1.
  std::vector<Communicator*> data_parallel_groups;
  // Gradients are all-reduced in buckets of at least this many bytes (--bucket-mb), launched as
  // soon as backward has finished every layer of a bucket.
  size_t bucket_bytes = size_t{25} << 20;
  // --ps: this replica is a parameter-server worker; per stage (index = stage; null for stages
  // held elsewhere) the client of that stage's worker replaces the step epilogue (push the
  // stage's gradients, pull its fresh parameters). Empty: the epilogue runs here.
  std::vector<PsClient*> parameter_servers;
  // --slow-worker R:F: after each step's schedule replica slow_replica sleeps (F - 1) x the time
  // the schedule took (a straggler for experiments; -1: none).
  int slow_replica = -1;
  double slow_factor = 1.0;
  // --shard-optimizer (R >= 2): each replica keeps the optimizer state of 1/R of every stage's
  // tensors (engine/parallel/optimizer_shards.h); gradients are reduce-scattered after backward
  // instead of all-reduced in buckets during it.
  bool shard_optimizer = false;
  // --shard full (R >= 2): parameters, gradients and optimizer state of every stage split
  // between the replicas, units of layers gathered around their compute
  // (engine/parallel/full_shard/unit_shards.h): --shard-unit layers per unit, and whether a
  // unit is dropped after its forward (--reshard-after-forward) or kept until the step's end.
  bool shard_full = false;
  int shard_unit_layers = 1;
  bool reshard_after_forward = true;
  bool shard_prefetch = false;  // --shard-prefetch: gathers ahead of use, on their own thread
  bool shard_reduce_every_microbatch = false;  // --shard-reduce microbatch
  // --shard-group G (hybrid sharding, HSDP): the replicas shard within groups of G consecutive
  // replicas and replicate across the R / G groups. 0 (or R): one group of all R. Per schedule
  // device held here, when 0 < G < R: the shard group (replicas g G .. g G + G - 1, rank =
  // replica % G) and the replicate group (the replicas with the same replica % G, rank =
  // replica / G).
  int shard_group_size = 0;
  std::vector<Communicator*> shard_groups, replicate_groups;
  bool shards_state() const { return shard_optimizer || shard_full; }
  bool hybrid_sharding() const { return shard_group_size > 0 && shard_group_size < replicas; }
  // --tp T (tensor parallelism): this pipeline copy is tensor rank `tensor_rank` of T; its
  // model holds that rank's slices (layers/tensor_parallel/shard_model.h) and its layers call
  // their own groups. tensor_parallel_group: one communicator over the T copies of this
  // replica (in one process) or of this device (one process per device), over which the
  // gradient norm is completed. The T copies of a replica see the same batch.
  int tensor_parallel = 1;
  int tensor_rank = 0;
  bool sequence_parallel = false;       // --sequence-parallel: the layers' TensorParallel says so
  bool tensor_parallel_overlap = true;  // --tp-overlap: the tensor groups run started collectives
                                        // beside the layer's compute
  // --tp-overlap on: and a device's adjacent forwards take turns at their collectives
  // (engine/comm/take_turns.h; with tensor_parallel_overlap and T > 1 only). Off by default:
  // no gain measured on these machines (docs/tensor-parallelism.md).
  bool tensor_parallel_overlap_forwards = false;
  Communicator* tensor_parallel_group = nullptr;

  bool uses_parameter_server() const { return !parameter_servers.empty(); }
  PsClient* parameter_server(int stage) const {
    const auto s = static_cast<size_t>(stage);
    return s < parameter_servers.size() ? parameter_servers[s] : nullptr;
  }

  Communicator* data_parallel_group(int device) const {
    const auto d = static_cast<size_t>(device);
    return d < data_parallel_groups.size() ? data_parallel_groups[d] : nullptr;
  }
  // Full sharding's groups of device d: the one parameters are cut across, and the one the
  // parts are all-reduced across (nullptr: none, G = R).
  Communicator* shard_group(int device) const {
    const auto d = static_cast<size_t>(device);
    return hybrid_sharding() ? (d < shard_groups.size() ? shard_groups[d] : nullptr)
                             : data_parallel_group(device);
  }
  Communicator* replicate_group(int device) const {
    const auto d = static_cast<size_t>(device);
    return hybrid_sharding() && d < replicate_groups.size() ? replicate_groups[d] : nullptr;
  }
};

}  // namespace pt
