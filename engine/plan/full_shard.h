#pragma once
// Full sharding (--shard full: ZeRO-3, PyTorch FSDP) in the planner: what one device holds when
// the R replicas of its stages share their parameters, gradients and optimizer state, and what
// its collectives cost (ARCHITECTURE.md "Full sharding in the planner"). Modelled on the runtime
// (engine/parallel/full_shard/: --shard-unit 1, --reshard-after-forward true):
//
//   unit     one layer of the cost table (a GPT's: one transformer block; the embedding and the
//            head one each), sharded however large; a tied parameter (which the runtime keeps
//            whole) is not told apart
//   gathers  per micro-batch, an all-gather of each unit's parameters before its forward and
//            again before its backward (B, or I), and before its W where the schedule splits
//            the backward (zero-bubble: released after I); a recomputed segment gathers its
//            units for the recomputation and keeps them for their backward. So 2 M per step
//            (3 M with a split backward): at M = 1, with the reduce-scatter below, issue 35's
//            "3 x model bytes"
//   reduce   one reduce-scatter of each unit's gradients per step, after they were summed over
//            the step's M micro-batches (the runtime's choice; FSDP2's under a pipeline)
//   memory   per stage (2 + slots) x params / R (this replica's parts), its activations as
//            without sharding (recompute_cost.h), and, with M > 1, the whole gradients being
//            summed: every unit's (a unit's whole gradient lives from its first weight gradient
//            of the step to the reduce-scatter after the last micro-batch's). Per device, the
//            gathered parameters of the largest unit, or of the largest recomputed segment (all
//            its units at once), and with M = 1 the largest unit's whole gradients; with
//            prefetch one unit more of each (the next unit's gather, the previous unit's
//            reduce-scatter still running)
//   time     ring collectives over the data-parallel group's link (the inter-node one where the
//            R replicas span nodes, cluster.h): an all-gather or a reduce-scatter of n bytes
//            (the whole; f32, as the all-reduce without sharding counts them) among R takes
//              (R - 1) / R x n / bandwidth + (R - 1) x latency
//            prefetch     (--shard-prefetch true, pipetrain-plan's default, as FSDP; the CPU
//                         runtime's is false: there it measured slower) a layer's
//                         gather runs while the layer before computes: it waits only for what
//                         that compute (the same layer's F, I + W, or each of I and W, per
//                         micro-batch) does not cover; in the backward the link also carries
//                         the reduce-scatter (the same bytes), 1 / M of it per micro-batch, and
//                         only the device's last one (its first layer's) waits after the
//                         pipeline. Optimistic: the runtime does not prefetch a stage's first
//                         unit of each pass, and the collectives' thread or kernels may slow
//                         the compute (on CPUs they share the cores)
//            no prefetch  (--shard-prefetch false) each gather is added to its layer's F, I or
//                         W, on the critical path; every reduce-scatter after the pipeline, as
//                         the all-reduce without sharding is
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/partition/layer_costs.h"
#include "engine/partition/partitioner.h"
#include "engine/pipeline/recompute.h"
#include "engine/plan/cluster.h"
#include "schedule/schedule.h"

namespace pt {

enum class ShardChoice { none, full };  // none: each replica holds its stages whole
const char* shard_name(ShardChoice s);  // "none" | "full"

// Seconds of one ring all-gather (or reduce-scatter) of `bytes`, the whole, among R ranks over
// `link`; 0 for R = 1 or no bytes.
double ring_allgather_s(double bytes, int R, const Link& link);

// A device's layer costs with each layer's parameter all-gathers among R priced into forward_s,
// backward_input_s and (split_backward: the schedule runs I and W apart) backward_weight_s:
// without prefetch added; with it only what the compute does not cover (the backward's share of
// the reduce-scatter of a step of M micro-batches included). forward_gather_s is what forward_s
// grew by.
std::vector<LayerProfile> with_full_shard_gathers(const std::vector<LayerProfile>& layers, int R,
                                                  int M, const Link& link, bool prefetch,
                                                  bool split_backward);

// Bytes of stage [first, last) on one of R replicas, as above: the parts, the whole gradients
// summed over M > 1 micro-batches, and the activations of `inflight` micro-batches.
int64_t full_shard_stage_bytes(const std::vector<LayerProfile>& layers, int first, int last,
                               int inflight, int optimizer_slots, const RecomputePolicy& policy,
                               bool last_stage, int R, int M);

// Bytes a device holds whole while it computes, over the stages it holds (`held`: [first, last)
// each; the one ending at the last layer is the last stage): the largest unit's or recomputed
// segment's parameters, and with M = 1 the largest unit's gradients; with prefetch, one unit
// more of each.
int64_t full_shard_gather_buffer_bytes(const std::vector<LayerProfile>& layers,
                                       const std::vector<std::pair<int, int>>& held,
                                       const RecomputePolicy& policy, int M, bool prefetch);

// Seconds after the pipeline for one device's reduce-scatters (`held` in stage order): every
// unit's without prefetch, only its first layer's with parameters (the last to finish) with it.
double full_shard_reduce_s(const std::vector<LayerProfile>& layers,
                           const std::vector<std::pair<int, int>>& held, int R, const Link& link,
                           bool prefetch);

// ---- over a replica's schedule and split (the planner's points) ----

// Per device of the schedule: the layers [first, last) of each stage it holds, in stage order.
std::vector<std::vector<std::pair<int, int>>> held_layers(const sched::Schedule& schedule,
                                                          const Partition& partition);

// Per device of one replica, each stage fully sharded over R replicas: peak bytes (its stages'
// parts, summed gradients and activations of `inflight` micro-batches per stage, and the units it
// holds whole while computing) and gradient bytes (the parts: what the epilogue steps).
std::pair<std::vector<int64_t>, std::vector<int64_t>> full_shard_device_memory(
    const sched::Schedule& schedule, const Partition& partition, const std::vector<int>& inflight,
    const std::vector<LayerProfile>& costs, int optimizer_slots, const RecomputePolicy& policy,
    int R, int M, bool prefetch);

// Seconds after the pipeline for the reduce-scatters of the slowest device (full_shard_reduce_s).
double full_shard_step_reduce_s(const sched::Schedule& schedule, const Partition& partition,
                                const std::vector<LayerProfile>& costs, int R, const Link& link,
                                bool prefetch);

// What the gathers add to the busiest device's step: M micro-batches of each of its layers' F, I
// and W, priced with (`gathered`, with_full_shard_gathers) and without (`plain`) them.
double full_shard_gather_added_s(const sched::Schedule& schedule, const Partition& partition,
                                 const std::vector<LayerProfile>& plain,
                                 const std::vector<LayerProfile>& gathered, int M);

}  // namespace pt
