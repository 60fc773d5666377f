#pragma once
// Planning a pipeline run from the user's flags, before anything runs: the schedule (generated
// or read from a file, lowered with SEND/RECV, validated and dry-run), the partition of layers
// into its stages (balanced by estimated or profiled costs, bounded by memory), and the timed
// simulation of one step with those costs (step time, bubble per device, peak in-flight
// activations per stage). `--plan-only` prints this and exits.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/partition/cost_source.h"
#include "engine/partition/layer_costs.h"
#include "engine/partition/partitioner.h"
#include "engine/pipeline/recompute.h"
#include "engine/plan/cluster.h"
#include "engine/plan/schedule_choice.h"
#include "schedule/schedule.h"
#include "schedule/simulate.h"

namespace pt {

struct PlanRequest {
  int devices = 1;          // --stages: pipeline devices D
  int microbatches = 1;     // M
  int64_t batch = 1;        // B (sets the micro-batch size the costs are for)
  ScheduleChoice schedule;  // 1f1b by default
  PartitionMethod partition{PartitionMethod::Kind::time, {}};
  int64_t mem_cap_bytes = 0;                // --mem-cap (per device)
  CostSource costs;                         // estimate by default
  int optimizer_slots = 1;                  // SGD momentum 1, AdamW 2
  double transfer_bytes_per_second = 30e9;  // for the simulated SEND/RECV times
  double transfer_latency_s = 0;            // added to each
  // The link between neighbouring pipeline devices d and d + 1 (D - 1 entries) where they
  // differ (a cluster's nodes, cluster.h); a boundary between devices further apart
  // (interleaved's last device -> first) takes the slowest link between them. Empty: the two
  // figures above everywhere.
  std::vector<Link> device_links;
  bool data_parallel = false;  // --dp > 1: add REDUCE_GRAD after each stage's last backward
  RecomputePolicy recompute;   // its extra forward is in the simulated backward (recompute_cost.h)
};

struct PipelinePlan {
  sched::Schedule schedule;         // lowered (SEND/RECV) and validated
  Partition partition;              // one StagePlan per (virtual) stage
  sched::SimResult simulated;       // with the partition's per-stage costs (seconds)
  sched::SimConfig simulated_with;  // those costs and the boundaries' transfer times
  std::string schedule_name;        // ScheduleChoice::str()
  std::string costs;                // "estimated ..." | "profiled on cpu:0..cpu:1 at once"
  // Per device: the parameters, gradients and optimizer state of every stage placed on it, plus
  // the most activation bytes its list holds at once (sched::peak_device_activation_bytes): with
  // several stages per device (interleaved, V shapes) less than the sum of the stages' peaks.
  std::vector<int64_t> device_peak_memory_bytes;

  double predicted_step_s() const { return simulated.step_time; }
  // The partition table, the schedule, predicted step time, bubble and memory: what
  // --plan-only prints.
  std::string report() const;
};

// Throws UsageError (bad flags: S > layers, M < 1, unknown schedule, a layout that does not sum
// to the layer count, a memory cap nothing fits, a device over the cap) or the validator's error (a
// schedule file with a missing or extra action, or a deadlock), each with what would fix it.
// `profiler` is needed for CostSource::Kind::profile (profiler_on: layer_costs.h).
PipelinePlan make_plan(const Model& model, const PlanRequest& request,
                       const LayerProfiler& profiler = {});

// The two halves of make_plan, for the planner (planner.h), which generates many schedules and
// reuses one cost table for all of them:
// a compute-only (or already lowered) schedule -> lowered (SEND/RECV, REDUCE_GRAD when
// data_parallel) and validated; throws UsageError with the validator's report.
sched::Schedule lower_schedule(const sched::Schedule& compute, bool data_parallel,
                               const std::string& name);
// Seconds to send `bytes` across stage boundary k (stage k -> k + 1) of `schedule` by the
// request's links (0 when both stages are on one device and links are given; the simulator
// charges no transfer there anyway).
double boundary_transfer_s(const PlanRequest& request, const sched::Schedule& schedule, int k,
                           double bytes);
// A lowered schedule + the costs of one micro-batch per layer -> partitioned (request.partition,
// mem_cap_bytes, optimizer_slots) and simulated (transfer_bytes_per_second, recompute). Throws
// UsageError from the partitioner (more stages than layers, a cap nothing fits).
PipelinePlan plan_with_costs(sched::Schedule lowered, const std::vector<LayerProfile>& costs,
                             const PlanRequest& request, std::string schedule_name,
                             std::string costs_description);

}  // namespace pt
