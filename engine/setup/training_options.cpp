#include "engine/setup/training_options.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/option_range.h"
#include "engine/devices/devices.h"
#include "engine/io/output_path.h"

namespace pt {

void TrainingOptions::check(int64_t batch) const {
  check_integer("--batch", batch, 1);
  if (microbatches < 1) throw UsageError("--microbatches must be >= 1");
  if (dp < 1) throw UsageError(fmt::format("--dp {} must be >= 1", dp));
  check_integer("--stages", stages, 1);
  check_integer("--tp", tp, 1, 1024);
  if (tp > 1) {
    // What tensor parallelism does not combine with yet: refused by name, never run wrong.
    const auto not_with_tp = [&](const char* flag, const char* why) {
      return UsageError(fmt::format("--tp {} with {}: {}; drop one of them", tp, flag, why));
    };
    if (ps > 0)
      throw not_with_tp("--ps", "parameter servers hold whole stages, not tensor-parallel slices");
    if (async_update)
      throw not_with_tp("--update async",
                        "its per-stage UPDATE completes no gradient norm across tensor ranks yet");
    if (shard_optimizer)
      throw not_with_tp("--shard-optimizer",
                        "the optimizer shards are not yet cut from tensor-parallel slices");
  }
  if (shard_full && !plan_auto) {
    if (shard_optimizer)
      throw UsageError(
          "--shard full with --shard-optimizer: full sharding already splits the optimizer state "
          "(and the parameters and gradients); drop --shard-optimizer");
    if (dp < 2)
      throw UsageError(fmt::format(
          "--shard full needs --dp R >= 2: it splits parameters, gradients and optimizer state "
          "between data-parallel replicas and this run has --dp {}; add --dp 2 (or more) or drop "
          "--shard full",
          dp));
    if (ps > 0)
      throw UsageError(
          "--shard full with --ps: the parameter servers hold the parameters and optimizer state; "
          "drop one of them");
    if (async_update)
      throw UsageError(
          "--shard full with --update async: each stage steps its whole optimizer at its own "
          "UPDATE, which full sharding's reduce-scatter and per-replica parts do not do; drop "
          "--shard full or use --update sync");
    check_integer("--shard-unit", shard_unit, 1, 1 << 20, "layers with parameters per unit");
    check_integer("--shard-group", shard_group, 0, dp,
                  fmt::format("replicas per shard group, dividing --dp {}; 0: all of them", dp));
    if (shard_group > 0 && dp % shard_group != 0)
      throw UsageError(fmt::format(
          "--shard-group {} does not divide --dp {}: the replicas shard within groups of G and "
          "replicate across R / G of them; use a divisor of {}",
          shard_group, dp, dp));
  }
  if (shard_optimizer && dp < 2)
    throw UsageError(fmt::format(
        "--shard-optimizer needs --dp R >= 2: it splits the optimizer state between data-parallel "
        "replicas and this run has --dp {}; add --dp 2 (or more) or drop --shard-optimizer",
        dp));
  if (plan_auto) {
    // The planner chooses these; a value given beside it would be silently overridden.
    const auto chosen_by_planner = [](const char* flag) {
      return UsageError(
          fmt::format("--plan auto chooses {} itself: drop {}, or drop --plan auto to use your own",
                      flag, flag));
    };
    if (stages != 1) throw chosen_by_planner("--stages");
    if (dp != 1) throw chosen_by_planner("--dp");
    if (tp != 1) throw chosen_by_planner("--tp");
    if (microbatches != 1) throw chosen_by_planner("--microbatches");
    if (schedule != ScheduleChoice{}) throw chosen_by_planner("--schedule");
    if (recompute.kind != RecomputePolicy::Kind::never) throw chosen_by_planner("--recompute");
    if (shard_full) throw chosen_by_planner("--shard");
    if (async_update || ps > 0)
      throw UsageError(
          "--plan auto plans synchronous all-reduce training: drop --update async and --ps, or "
          "drop --plan auto");
    check_integer("--plan-top", plan_top_k, 1, 1000);
  }
  if (!write_costs.empty() && !plan_auto)
    throw UsageError(
        "--write-costs writes the layer costs --plan auto plans with: add --plan auto (and "
        "--plan-only to stop there)");
  if (!write_costs.empty()) check_output_path(write_costs, "--write-costs");
  // More threads per device than the machine has hardware threads only oversubscribe (ARCHITECTURE
  // notes halved throughput); up to 4x is allowed for experiments, more is surely a typo.
  const int cores = available_cores();
  check_integer("--threads", threads, 0, int64_t{4} * cores,
                fmt::format("4 x the {} cores of this machine; 0: the cores divided between the "
                            "devices",
                            cores));
  // The deadline is now + timeout: beyond 1e6 s (11 days) it is a typo, and inf overflows it.
  check_real("--timeout", timeout_s, {.lo = 0, .lo_open = true, .hi = kMaxTimeoutS}, "seconds");
  // A bucket of 1 TiB is already larger than any model this engine holds.
  check_real("--bucket-mb", bucket_mib, {.lo = 0, .lo_open = true, .hi = 1 << 20}, "MiB");
  check_real("--mem-cap", mem_cap_mib, {.lo = 0, .hi = 1 << 30}, "MiB; 0: no cap");
  if (microbatches > batch)
    throw UsageError(
        fmt::format("--microbatches {} is more than the --batch of {} samples: every "
                    "micro-batch needs at least one sample",
                    microbatches, batch));
  if (static_cast<int64_t>(microbatches) * dp > batch)
    throw UsageError(
        fmt::format("--dp {} x --microbatches {} is more than the --batch of {} samples: every "
                    "micro-batch of every replica needs at least one sample",
                    dp, microbatches, batch));
  check_integer("--ps", ps, 0, 1024, "parameter servers K; 0: none");
  if (staleness >= 0 && ps < 1)
    throw UsageError(fmt::format(
        "--staleness {} needs --ps K (a parameter server): add --ps 1, or drop --staleness",
        staleness));
  check_integer("--staleness", staleness, -1, 1'000'000, "global steps; 0: synchronous");
  if (ps > 0 && shard_optimizer)
    throw UsageError(
        "--shard-optimizer with --ps: the parameter servers already hold the optimizer state, "
        "sharded by layer; drop --shard-optimizer");
  if (ps > 0 && async_update)
    throw UsageError(
        "--ps with --update async: the parameter servers apply the updates, so there is no "
        "per-stage UPDATE to make asynchronous; drop --ps (--update async --dp R all-reduces) or "
        "use --ps K --staleness T for asynchronous updates");
  if (ps > 0 && schedule.v_shape())
    throw UsageError(fmt::format(
        "--ps with --schedule {}: a V puts two stages on every worker, and a --ps worker is one "
        "stage on one device: use --schedule 1f1b, gpipe or zb-h1",
        schedule.str()));
  if (slow_replica >= 0) {
    if (dp < 2)
      throw UsageError(fmt::format(
          "--slow-worker {}:{} slows one data-parallel replica against the others, and this run "
          "has one (--dp {}): add --dp 2 or more (with or without --ps), or drop --slow-worker",
          slow_replica, slow_factor, dp));
    if (slow_replica >= dp)
      throw UsageError(
          fmt::format("--slow-worker {}:{} names replica {} but --dp is {}: use a "
                      "replica in [0, {})",
                      slow_replica, slow_factor, slow_replica, dp, dp));
    check_real("--slow-worker factor", slow_factor, {.lo = 1, .hi = 1000}, "1: not slowed");
  }
  if (async_update) {
    check_integer("--async-window", async_window, 1, 1 << 20);
    if (schedule.kind != ScheduleChoice::Kind::one_f_one_b)
      throw UsageError(fmt::format(
          "--update async runs its own 1F1B without flushes; --schedule {} is not supported: use "
          "--schedule 1f1b or --update sync",
          schedule.str()));
    if (stages < 2)
      throw UsageError(
          "--update async needs --stages >= 2 (one stage has no pipeline bubble to remove): raise "
          "--stages or use --update sync");
    if (shard_optimizer)
      throw UsageError(
          "--shard-optimizer with --update async: each stage steps its whole optimizer at its own "
          "UPDATE, which the shards' reduce-scatter / all-gather step does not do; drop "
          "--shard-optimizer or use --update sync");
    if (microbatches < stages - 1)
      throw UsageError(fmt::format(
          "--update async with --stages {} needs --microbatches >= {} (stages - 1), or a stage "
          "would need a third weight version: raise --microbatches",
          stages, stages - 1));
  }
  if (!trace.empty()) check_output_path(trace, "--trace");
  if (!timeline.empty()) check_output_path(timeline, "--timeline");
}

bool TrainingOptions::pipelined() const {
  return force_pipeline || stages > 1 || schedule.kind == ScheduleChoice::Kind::file ||
         schedule.v_shape() || !trace.empty() || !timeline.empty() || plan_only || dp > 1 ||
         tp > 1 || ps > 0 || async_update;
}

}  // namespace pt
