#pragma once
// The planner (--plan auto, pipetrain-plan): which split of D devices into T tensor-parallel
// ranks x S stages x R replicas, schedule, micro-batch count M and recompute policy gives the
// shortest predicted step under a memory cap. Plain data in (the devices, the batch, the cap,
// and a cost table per micro-batch size and T: estimated or profiled, the caller's choice), a
// ranked list and the reasons for every rejected class out; it runs nothing, so a what-if tool
// can call it for devices it does not have.
//
// Each candidate is planned exactly as a run with those flags is (plan.h: generate, lower,
// partition by time, the timed simulator), with per-device memory from recompute_cost.h. With
// R > 1 the gradient all-reduce is added after the step, not overlapped (an upper bound): a ring
// of R, 2(R-1)/R x the device's gradient bytes / allreduce_bytes_per_second + 2(R-1) x latency
// (stated by default; --plan auto measures it, step_overheads.h). Then the step's epilogue:
// zeroing, the gradient norm and the optimizer update (step_overheads.h; zero by default).
//
// Tensor parallelism (tensor_parallel.h; ARCHITECTURE.md "Tensor parallelism in the planner"):
// T innermost, T | heads and T | devices_per_node; each of a stage's T ranks holds the cost
// source's 1/T share (compute, weights, gradients, optimizer state, activations: gpt_costs.h),
// its layers wait for their all-reduces within the node (ring, allreduce_* figures), a stage
// boundary carries the rank's share over the boundary's link, and each rank's gradient
// all-reduce over its R replicas carries its 1/T of the stage's gradients. The memory cap is per
// rank. T = 1 (the default) is the planner without it.
//
// Full sharding (full_shard.h; ARCHITECTURE.md "Full sharding in the planner"): with R > 1 a
// candidate may shard its stages' parameters, gradients and optimizer state over the R replicas
// (ShardChoice::full) instead of holding them whole: its memory is full_shard.h's, its layers
// wait for their parameter all-gathers (what compute does not hide with prefetch; all of them
// without), and a reduce-scatter of the gradients replaces the all-reduce after the pipeline.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/partition/layer_costs.h"
#include "engine/partition/partition_method.h"
#include "engine/partition/sharded_costs.h"
#include "engine/partition/step_overheads.h"
#include "engine/pipeline/recompute.h"
#include "engine/plan/cluster.h"
#include "engine/plan/full_shard.h"

namespace pt {

struct PlannerRequest {
  int devices = 1;                     // D: every candidate uses all of them (T x S x R = D)
  int64_t batch = 1;                   // global batch B (R replicas of B / R; M micro-batches each)
  int64_t mem_cap_bytes = 0;           // per device; 0: no cap
  int optimizer_slots = 1;             // SGD momentum 1, AdamW 2
  std::vector<std::string> schedules;  // empty: planner_schedule_names()
  std::vector<RecomputePolicy> recompute;   // empty: never, except_last, always
  int max_microbatches = 32;                // M among the divisors of B / R up to this
  double transfer_bytes_per_second = 30e9;  // stage boundaries (as PlanRequest)
  double allreduce_bytes_per_second = 10e9;
  double allreduce_latency_s = 20e-6;
  StepOverheads overheads;  // zeroing, norm and optimizer update per parameter (default: free)
  // A cluster (pipetrain-plan, cluster.h): nodes of devices_per_node devices (0: one node, as
  // --plan auto), both placements of cluster.h searched where their links differ. A stage
  // boundary or an all-reduce that crosses nodes uses inter_node instead of the figures above.
  int devices_per_node = 0;
  double transfer_latency_s = 0;  // per boundary transfer within a node
  Link inter_node;
  // 0: plan every candidate exactly (--plan auto). N > 0, for thousands of devices: estimate
  // every candidate first (plan_estimate below) and plan exactly only the N best estimates.
  int simulate_top = 0;
  // Tensor-parallel degrees T to search (tensor_parallel_degrees() lists the valid ones); empty:
  // {1}. Each is checked (check_tensor_parallel): T must divide devices, devices_per_node and
  // heads. heads 0 (the costs say nothing of sharding): T = 1 only.
  std::vector<int> tensor_parallel;
  int heads = 0;
  // Which of none and full sharding to search where R > 1 (R = 1 is always none); empty: {none}
  // (--plan auto: a run it plans does not shard). {full} alone leaves out every R = 1 candidate.
  std::vector<ShardChoice> shard;
  // Full sharding's gathers run while the layer before computes (full_shard.h), as the runtime's
  // --shard-prefetch true (pipetrain-plan's default) and FSDP do; false: each waited for when
  // needed.
  bool shard_prefetch = true;
  // Stage counts S to search; empty: every S that divides the devices (per T).
  std::vector<int> stages;
};

struct PlanCandidate {
  int stages = 1, replicas = 1, microbatches = 1;  // S (devices per replica), R, M
  int tensor_parallel = 1;                // T: ranks per stage (a "device" above is T of them)
  ShardChoice shard = ShardChoice::none;  // full: the stages sharded over the R replicas
  int threads = 0;  // --plan auto's merged device (one device with every device's threads): its
                    // threads; 0: the devices as given
  std::string schedule;  // a sched::generate() name
  RecomputePolicy recompute;
  Placement placement = Placement::stages;  // on a cluster (devices_per_node > 0), cluster.h
  std::vector<int> layout;                  // layers per (virtual) stage
  PartitionMethod partition;                // how layout was found (time, or memory under the cap)
  double step_s = 0;                        // pipeline_s + allreduce_s + epilogue_s
  double pipeline_s = 0;                    // the timed simulation of one replica's step
  double allreduce_s = 0;  // R > 1: the gradient all-reduce; shard full: the reduce-scatters
  // Shard full: seconds the parameter all-gathers add to the busiest device's step (inside
  // pipeline_s: with prefetch what compute does not cover, all of them without).
  double gather_s = 0;
  double epilogue_s = 0;            // zeroing, norm, update (request.overheads)
  double bubble = 0;                // 1 - mean device busy time / (pipeline_s + allreduce_s)
  double estimate_s = 0;            // simulate_top > 0: the estimate that chose it for planning
  std::vector<int64_t> peak_bytes;  // per device of one replica
  int64_t max_peak_bytes() const;
};

struct PlanRejection {
  std::string schedule;  // the class: schedule and why
  std::string why;       // "generator refused", "over the memory cap", "too few layers", ...
  int count = 0;         // candidates of the class
  std::string example;   // one candidate's full reason
};

struct PlannerResult {
  std::vector<PlanCandidate> ranked;  // fastest first; ties: less memory, then search order
  std::vector<PlanRejection> rejected;
  int considered = 0;                // candidates tried
  int simulated = 0;                 // of them, planned exactly (all, unless simulate_top)
  int64_t smallest_fitting_cap = 0;  // the smallest cap some candidate fits (0: none planned)

  // The top k as a table (rank, predicted step, bubble, peak MiB per device, S x R (T x S x R
  // when T > 1), M, schedule, recompute, and shard when some plan shards), then one line per
  // rejected class.
  std::string report(int k) const;
};

// Costs of one micro-batch of `microbatch_size` samples, one entry per layer.
using CostsFor = std::function<std::vector<LayerProfile>(int64_t microbatch_size)>;
// The same for one of T tensor-parallel ranks, with the bytes it all-reduces (sharded_costs.h).
using ShardedCostsFor = std::function<ShardedCosts(int64_t microbatch_size, int T)>;

// With simulate_top > 0 each candidate is first estimated, without its full schedule: the
// schedule is simulated with unit times at M' = min(M, 6 S) micro-batches (cached per schedule,
// S and M'); its idle time (fill and drain, which do not grow with M) is added to the slowest
// device's real busy time for M micro-batches, in the mean device's time per unit, plus each
// boundary's transfer twice (the fill forward, the drain backward). Peak in-flight micro-batches
// are the unit run's (all M where it held all M'). Candidates over the cap by this estimate are
// rejected; the best simulate_top by estimated step (+ all-reduce) are then planned exactly as
// without it, and only they are ranked.
//
// Throws UsageError when nothing can be planned: a cap nothing fits (naming the smallest cap
// that would), or every candidate refused (naming the reasons), and for a T that is not valid
// (check_tensor_parallel). With CostsFor (costs that do not shard) T must be 1.
PlannerResult search_plans(const ShardedCostsFor& costs, const PlannerRequest& request);
PlannerResult search_plans(const CostsFor& costs, const PlannerRequest& request);

// sched::schedule_names() without parameters, and interleaved:2 and interleaved:3 (file:PATH and
// other parameterised names are left out): new generators join the search when registered.
std::vector<std::string> planner_schedule_names();

}  // namespace pt
