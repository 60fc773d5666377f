#pragma once
// The scheduler flags every example shares (devices, threads, stages, micro-batches, schedule,
// partition, recomputation, data parallelism, timeout, plan/trace output), registered with
// CLI11 as text and converted once, at the boundary, into the library's typed
// pt::TrainingOptions (engine/setup/training_options.h). The library itself knows no CLI11.
#include <climits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/setup/training_options.h"

namespace pt::examples {

struct ParallelFlags {
  std::string devices = "auto";
  std::string precision = "fp32";  // GEMM arithmetic on CUDA devices: fp32 | tf32 | bf16
  std::string attention = "auto";  // attention kernel on CUDA devices
  int threads = 0;  // per device; 0: the cores divided between devices (or processes)
  int stages = 1, dp = 1, tp = 1, microbatches = 1;
  std::string sequence_parallel = "on";
  std::string tp_overlap = "backward";
  std::string schedule = "1f1b", partition = "time", recompute = "never", costs = "estimate";
  double mem_cap_mib = 0, timeout = 60, bucket_mb = 25;
  bool plan_only = false;
  std::string plan;  // --plan auto: search the plan ("": the flags say it)
  int plan_top = 10;
  std::string write_costs;  // --plan auto: the layer costs it used, for pipetrain-plan
  // The flags --plan auto chooses that were given on the command line, even at their default
  // values (--stages 1 beside --plan auto is refused too: the planner would ignore it).
  std::vector<std::string> given;
  bool shard_optimizer = false;
  std::string shard = "none";  // none | optimizer | full
  int shard_unit = 1;
  int shard_group = 0;
  std::string shard_prefetch = "false";
  std::string shard_reduce = "auto";
  std::string reshard_after_forward = "auto";
  std::string trace, timeline;
  std::string flight_recorder;  // folder for the flight records (pt::run_main)
  // --ps K, --staleness T (kNotGiven: left out), --slow-worker R:F ("": none).
  static constexpr int kNotGiven = INT_MIN;
  int ps = kNotGiven, staleness = kNotGiven;
  std::string slow_worker;
  std::string update = "sync";   // sync | async (PipeDream-2BW)
  int async_window = kNotGiven;  // TrainingOptions' default when left out
  std::string async_delay;  // per-microbatch | per-stage | uniform ("": left out, per-microbatch)
  std::string async_momentum;  // lookahead | plain ("": left out, lookahead)
};

// Registers --devices --precision --threads --stages --dp --microbatches --schedule --partition
// --costs --mem-cap --recompute --timeout --bucket-mb --shard-optimizer --plan-only --trace
// --timeline --flight-recorder --ps --staleness --slow-worker --update --async-window
// --async-delay --async-momentum --plan --plan-top.
void add_parallel_flags(CLI::App& app, ParallelFlags& f);

// Parses the texts (schedule, partition, costs, recompute, precision, slow worker); throws
// UsageError naming the valid forms of the first bad one (and --ps K < 1, --staleness T < 0,
// --plan other than auto, --plan auto beside a flag it chooses).
TrainingOptions training_options(const ParallelFlags& f);

}  // namespace pt::examples
