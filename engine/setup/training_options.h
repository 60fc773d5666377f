#pragma once
// What a training run is spread over: devices, stages S, data-parallel replicas R, micro-batches
// M, and how the pipeline is planned (schedule, partition, costs, recomputation). Plain values:
// a program fills them (the examples from their command-line flags, once, at the boundary) and
// make_training (training_run.h) builds the engine from them. Error messages name the options by
// the examples' command-line flags (microbatches: --microbatches, bucket_mib: --bucket-mb, ...).
#include <cstdint>
#include <optional>
#include <string>

#include "engine/devices/cuda_plugin.h"
#include "engine/partition/cost_source.h"
#include "engine/partition/partition_method.h"
#include "engine/pipeline/recompute.h"
#include "engine/plan/schedule_choice.h"
#include "engine/update/async_delay.h"
#include "engine/update/async_momentum.h"

namespace pt {

// The longest --timeout: 1e6 s (11.6 days). Any wait longer than that is a hang, and a deadline
// of now + inf (or 1e300) overflows the clock.
inline constexpr double kMaxTimeoutS = 1e6;

struct TrainingOptions {
  std::string devices =
      "auto";  // one per stage and replica: "cpu:0,cpu:1" | "cpu:0..3" | "cuda:0" | "auto"
  CudaPrecision precision = CudaPrecision::fp32;           // GEMM arithmetic on CUDA devices
  AttentionKernel attention = AttentionKernel::automatic;  // --attention (CUDA devices)
  int threads = 0;  // per device; 0: the cores divided between devices (or processes)
  int stages = 1;   // S
  int dp = 1;       // R pipeline replicas (in this process, or one process per device under mpirun)
  // --tp T: tensor-parallel ranks per stage (the mesh R x S x T, T innermost: a stage's T ranks
  // are neighbouring devices / processes); the model's declared layers split across them
  // (layers/tensor_parallel/shard_model.h).
  int tp = 1;
  // --sequence-parallel (with --tp > 1; on by default, Megatron-Core's recommendation): between
  // the tensor-parallel regions of a transformer block the activations are split along the
  // sequence (LayerNorms and residual adds on 1/T of the tokens; all-gather / reduce-scatter in
  // place of each all-reduce). Layers without a sequence ignore it.
  bool sequence_parallel = true;
  // --tp-overlap (with --tp > 1): a layer's tensor-parallel collectives run beside its other
  // work where the layer and the devices allow (the input gradient's all-reduce while the
  // weight gradients are computed, Megatron-LM's); off: each where it is called.
  bool tp_overlap = true;
  // And adjacent forwards of two micro-batches take turns at their collectives (--tp-overlap on;
  // `backward`, the default: only the above). Needs tp_overlap.
  bool tp_overlap_forwards = false;
  int microbatches = 1;     // M per replica
  ScheduleChoice schedule;  // 1f1b
  PartitionMethod partition{PartitionMethod::Kind::time,
                            {}};  // the slowest stage as fast as possible
  CostSource costs;               // estimated from FLOPs and bytes
  RecomputePolicy recompute;      // never
  double mem_cap_mib = 0;         // per device, for PartitionMethod::Kind::memory (0: no cap)
  double timeout_s = 60;          // how long any wait for a peer may take
  double bucket_mib = 25;  // data parallelism: gradients are all-reduced in buckets of this size
  // --shard-optimizer: each replica keeps the optimizer state of 1/R of the tensors (ZeRO-1,
  // engine/parallel/optimizer_shards.h); needs dp >= 2.
  bool shard_optimizer = false;
  // --shard full: parameters, gradients and optimizer state split between the replicas (ZeRO-3,
  // engine/parallel/full_shard/); --shard-unit layers per gathered unit;
  // --reshard-after-forward false keeps a gathered unit until the step's end (ZeRO-2-like).
  bool shard_full = false;
  int shard_unit = 1;
  // nullopt (auto): false with --stages > 1, as torchtitan does under a pipeline (each of M
  // micro-batches would otherwise gather every unit twice), true without.
  std::optional<bool> reshard_after_forward;
  bool resolved_reshard_after_forward() const {
    return reshard_after_forward.value_or(stages == 1);
  }
  int shard_group = 0;          // --shard-group G: shard within groups of G replicas (0: all R)
  bool shard_prefetch = false;  // --shard-prefetch: the next unit's gather overlaps compute
  // --shard-reduce microbatch (true): reduce-scatter after every micro-batch (gradients stay
  // sharded; M times the traffic; sums in another order than --dp's); step (false): once per
  // step. nullopt (auto): as FSDP2 without stages (every backward), as torchtitan with them
  // (once, after the last micro-batch).
  std::optional<bool> shard_reduce_every_microbatch;
  bool resolved_reduce_every_microbatch() const {
    return shard_reduce_every_microbatch.value_or(stages == 1);
  }
  // Use the pipeline runtime even for one stage on one device (e.g. to compare it with Trainer).
  bool force_pipeline = false;
  // --ps K: K parameter servers hold the parameters and optimizer state (0: none; the R
  // replicas all-reduce). --staleness T: 0 synchronous (the default with --ps), T >= 1 bounded
  // asynchronous (engine/parallel/parameter_server.h); -1: not given.
  int ps = 0;
  int staleness = -1;
  // --slow-worker R:F: replica R sleeps (F - 1) x its compute time every step (-1: none).
  int slow_replica = -1;
  double slow_factor = 1.0;
  bool plan_only = false;  // make_training plans and prints, and builds no engine
  // --plan auto: make_training searches stages x dp, schedule, microbatches and recompute for
  // the devices listed (engine/setup/auto_plan.h) and runs the fastest; those four options must
  // be left at their defaults. plan_top_k: rows of the ranked table it prints.
  bool plan_auto = false;
  int plan_top_k = 10;
  // --write-costs FILE (with --plan auto): the layer costs the planner used, one table per
  // micro-batch size, as a cost file for pipetrain-plan (engine/partition/cost_file.h).
  std::string write_costs;
  // --update async: PipeDream-2BW (engine/update/weight_versions.h), --async-window steps per
  // schedule run. Only with 1f1b, --stages >= 2, --dp 1, --microbatches >= stages - 1, no --clip.
  bool async_update = false;
  int async_window = 8;
  // --async-delay: per-microbatch (the default: only the micro-batches that start before their
  // stage's previous update one step), per-stage (the last stage none, the others one step) or
  // uniform (PipeDream-2BW, every stage one step): engine/update/async_delay.h.
  AsyncDelay async_delay = AsyncDelay::per_microbatch;
  // --async-momentum: lookahead (the default: Nesterov's form of the optimizer's momentum) or
  // plain (the optimizer as configured): engine/update/async_momentum.h. With both at the
  // other value, the update is PipeDream-2BW's exactly.
  AsyncMomentum async_momentum = AsyncMomentum::lookahead;
  bool print = true;  // make_training prints the device note and the plan on stdout
  std::string trace,
      timeline;  // report_pipeline writes the last step's Chrome trace / SVG timeline here

  // Checks that need no work: every number in its range (--threads at most 4 x the cores,
  // --timeout in (0, kMaxTimeoutS], --bucket-mb in (0, 2^20], --mem-cap in [0, 2^30], all finite),
  // against the global batch B (>= 1), and the trace and timeline paths (check_output_path);
  // throws UsageError naming the flag, the value and the range.
  void check(int64_t batch) const;
  // True when the run needs the pipeline runtime rather than the single-device Trainer.
  bool pipelined() const;
};

}  // namespace pt
