#pragma once
// pipetrain-plan's flags, parsed and checked here (main() and a fuzz target can both call it):
// where the layer costs come from (a cost file, or a GPT's shape and an achieved FLOP/s), the
// cluster file, and the search's bounds (tensor-parallel degrees, stages, full sharding,
// schedules, recomputation).
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/partition/gpt_costs.h"
#include "engine/pipeline/recompute.h"
#include "engine/plan/full_shard.h"

namespace pt::examples {

struct PlanFlags {
  std::string costs;        // --costs FILE
  std::string write_costs;  // --write-costs FILE (the GPT's costs)
  std::string cluster;      // --cluster FILE
  GptShape gpt;             // --gpt-layers --gpt-width --context --vocab --heads
  double flops = 0;         // --flops: achieved FLOP/s per device (0: the cluster file's)
  // Which of --gpt-layers --gpt-width --context --vocab --flops were given (0 is refused, not
  // taken for "missing").
  std::vector<std::string> gpt_given;
  int64_t batch = 0;       // --batch: global batch B (samples)
  double mem_cap_mib = 0;  // --mem-cap MiB (0: no cap); not given: the cluster's memory
  bool mem_cap_given = false;
  int top = 10;           // --top K rows
  std::string schedules;  // --schedules a,b ("": all the planner knows)
  int max_microbatches = 1024;
  int optimizer_slots = 2;  // AdamW
  int simulate = 8;         // plan exactly the best N estimates; 0: all (as --plan auto)
  int devices = 0;          // --devices N of the cluster's (0: all)
  std::string tensor_parallel = "auto";  // --tensor-parallel auto | T,T,...
  bool sequence_parallel = false;        // --sequence-parallel
  std::string recompute;                 // --recompute never,always,... ("": the planner's three)
  std::string stages;                    // --stages S,S,... ("": every S)
  std::string shard = "none";            // --shard none | full | both
  std::string shard_prefetch = "true";   // --shard-prefetch true | false (full_shard.h)
};

// The search's lists, from the flags above.
struct PlanChoices {
  std::vector<std::string> schedules;      // empty: all
  std::vector<RecomputePolicy> recompute;  // empty: never, except_last, always
  std::vector<int> tensor_parallel;        // empty: auto (every T the cluster and heads allow)
  std::vector<int> stages;                 // empty: every S
  std::vector<ShardChoice> shard;          // none, full, or both
};

void add_plan_flags(CLI::App& app, PlanFlags& f);

// The checks that need no file: costs from exactly one source (--flops may come from the cluster
// file), --cluster (unless only writing a GPT's costs), --batch, --top, --max-microbatches,
// --optimizer-slots, --simulate, --devices and --mem-cap in range, each --schedules name known
// (listing the valid ones), each --recompute policy valid, --tensor-parallel auto or whole
// numbers >= 1 and --stages whole numbers >= 1 (whether each divides the heads, the nodes and
// the devices is the planner's check), --shard none, full or both, and
// --tensor-parallel or --sequence-parallel only with a GPT's shape. Throws UsageError naming the
// flag and the fix.
PlanChoices check_plan_flags(const PlanFlags& f);

}  // namespace pt::examples
