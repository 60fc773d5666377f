#include "examples/common/parallel_flags.h"

#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/option_range.h"
#include "examples/common/command_line.h"
#include "examples/common/integer_text.h"

namespace pt::examples {

namespace {

// The ranges of the flags whose value 0 or -1 means something else in TrainingOptions: stated
// once for the text check and the range check.
constexpr const char* kPsRange = "between 1 and 1024 (parameter servers K)";
constexpr const char* kStalenessRange = "between 0 and 1000000 (global steps; 0: synchronous)";

}  // namespace

void add_parallel_flags(CLI::App& app, ParallelFlags& f) {
  app.add_option("--devices", f.devices,
                 "one device per stage and replica: cpu:0,cpu:1 | cpu:0..3 | auto")
      ->capture_default_str();
  app.add_option("--precision", f.precision,
                 "GEMM/conv arithmetic on CUDA devices: fp32 | tf32 | bf16 (fp32 weights and "
                 "optimizer state)")
      ->capture_default_str();
  app.add_option("--attention", f.attention,
                 "causal attention kernel on CUDA devices: auto (cuDNN's fused flash attention "
                 "with --precision bf16 where the shape suits, else native) | native | cudnn | "
                 "cudnn-deterministic (the same bits every run)")
      ->capture_default_str();
  app.add_option("--threads", f.threads, "threads per device (0: cores / devices)")
      ->capture_default_str()
      ->check(integer_text<int>(">= 0 (0: the cores divided between the devices)"));
  app.add_option("--stages", f.stages, "pipeline stages S (one device each)")
      ->capture_default_str()
      ->check(integer_text<int>(">= 1"));
  app.add_option("--dp", f.dp,
                 "data-parallel replicas R of the pipeline (R x S devices or processes)")
      ->capture_default_str()
      ->check(integer_text<int>(">= 1"));
  app.add_option("--tp", f.tp,
                 "tensor-parallel ranks T per stage: the model's declared layers split across "
                 "them (R x S x T devices or processes)")
      ->capture_default_str()
      ->check(integer_text<int>(">= 1"));
  app.add_option("--sequence-parallel", f.sequence_parallel,
                 "with --tp > 1: split the activations between a transformer block's "
                 "tensor-parallel regions along the sequence (on | off; on needs --tp to divide "
                 "the sequence length)")
      ->capture_default_str();
  app.add_option("--tp-overlap", f.tp_overlap,
                 "with --tp > 1: run tensor-parallel collectives beside other work where it can: "
                 "backward (a layer's input-gradient all-reduce beside its weight gradients) | on "
                 "(and two adjacent forwards taking turns at their collectives) | off")
      ->capture_default_str();
  app.add_option("--microbatches", f.microbatches,
                 "split each replica's batch into M micro-batches")
      ->capture_default_str()
      ->check(integer_text<int>(">= 1"));
  app.add_option("--schedule", f.schedule,
                 "gpipe | 1f1b | interleaved:V | zb-h1 | zb-h2 | zbv | v-half | v-min | dualpipev "
                 "| file:PATH")
      ->capture_default_str();
  app.add_option("--partition", f.partition, "uniform | params | time | memory | layout:a,b,...")
      ->capture_default_str();
  app.add_option("--costs", f.costs, "layer costs for the partitioner: estimate | profile")
      ->capture_default_str();
  app.add_option("--mem-cap", f.mem_cap_mib,
                 "memory cap per device in MiB (--partition memory, --plan auto; 0: no cap)")
      ->capture_default_str();
  app.add_option("--recompute", f.recompute, "never | always | except_last | every:K")
      ->capture_default_str();
  app.add_option("--timeout", f.timeout, "seconds any wait for a peer may take")
      ->capture_default_str();
  app.add_option("--bucket-mb", f.bucket_mb,
                 "gradients are all-reduced in buckets of this many MiB")
      ->capture_default_str();
  app.add_flag("--shard-optimizer", f.shard_optimizer,
               "with --dp R >= 2: each replica keeps 1/R of the optimizer state (ZeRO-1); "
               "gradients are reduce-scattered, parameters all-gathered");
  app.add_option("--shard", f.shard,
                 "with --dp R >= 2, what each replica keeps 1/R of: none | optimizer (the same "
                 "as --shard-optimizer) | full (parameters, gradients and optimizer state: "
                 "ZeRO-3 / FSDP; units of layers gathered for forward and backward)")
      ->capture_default_str();
  app.add_option("--shard-unit", f.shard_unit,
                 "--shard full: layers with parameters per gathered unit")
      ->capture_default_str()
      ->check(integer_text<int>("between 1 and 1048576"));
  app.add_option("--shard-group", f.shard_group,
                 "--shard full: shard within groups of G replicas and replicate across the R / G "
                 "groups (hybrid sharding, HSDP); 0: one group of all R")
      ->capture_default_str()
      ->check(integer_text<int>("between 0 and --dp"));
  app.add_option("--shard-prefetch", f.shard_prefetch,
                 "--shard full: true gathers the next unit while this one computes (on a thread "
                 "of its own, as FSDP prefetches); false gathers each unit when it is needed "
                 "(measured faster on 2 cores, where that thread competes for them)")
      ->capture_default_str();
  app.add_option("--shard-reduce", f.shard_reduce,
                 "--shard full: step reduce-scatters a unit's gradients once, after the step's "
                 "last micro-batch (the same bits as --dp; whole gradients during the step); "
                 "microbatch after every micro-batch (gradients stay sharded; M times the "
                 "traffic; sums in another order); auto: microbatch without --stages (FSDP2), "
                 "step with them (torchtitan)")
      ->capture_default_str();
  app.add_option("--reshard-after-forward", f.reshard_after_forward,
                 "--shard full: true drops a unit after its forward and gathers it again for "
                 "backward (FSDP's default); false keeps it whole until the step ends (one "
                 "gather per step); auto: false with --stages > 1 (torchtitan's choice under a "
                 "pipeline), true without")
      ->capture_default_str();
  app.add_flag("--plan-only", f.plan_only,
               "print partition, schedule and predicted step time, then exit");
  app.add_option("--plan", f.plan,
                 "auto: search stages x replicas, schedule, micro-batches and recomputation for "
                 "the listed --devices, --batch and --mem-cap, print the ranked plans and run the "
                 "fastest (with --plan-only: print and exit); default: none, the flags give the "
                 "plan");
  app.add_option("--plan-top", f.plan_top, "--plan auto: rows of the ranked table")
      ->capture_default_str()
      ->check(integer_text<int>("between 1 and 1000"));
  app.add_option("--write-costs", f.write_costs,
                 "--plan auto: write the layer costs it planned with (one table per micro-batch "
                 "size) as a cost file for pipetrain-plan --costs (default: none)");
  // Which of the flags the planner chooses were given (CLI11 calls each() once per value).
  for (const char* name :
       {"--stages", "--dp", "--microbatches", "--schedule", "--recompute", "--partition"})
    app.get_option(name)->each([&f, name](const std::string&) { f.given.emplace_back(name); });
  app.add_option("--trace", f.trace,
                 "write a Chrome/Perfetto trace of the last step to this file (default: none)");
  app.add_option("--timeline", f.timeline,
                 "write an SVG timeline of the last step to this file (default: none)");
  app.add_option("--ps", f.ps,
                 "K parameter servers hold the parameters and optimizer state, sharded by layer "
                 "(under mpirun: K extra processes, the last K ranks; default: none, the replicas "
                 "all-reduce)")
      ->check(integer_text<int>(kPsRange));
  app.add_option("--staleness", f.staleness,
                 "with --ps: 0 synchronous (default); T >= 1 asynchronous, no worker starts a step "
                 "while another computes on parameters more than T global steps old")
      ->check(integer_text<int>(kStalenessRange));
  app.add_option("--slow-worker", f.slow_worker,
                 "R:F: replica R sleeps (F - 1) x its compute time every step (a straggler; needs "
                 "--dp R >= 2; default: none)");
  app.add_option("--flight-recorder", f.flight_recorder,
                 "folder for each process's record of its last actions and communication calls "
                 "(rank-N.json), written on a timeout, an error or SIGUSR1; read it with "
                 "pipetrain-hang DIR (created if missing; default: none)");
  app.add_option("--update", f.update,
                 "sync: every step flushes the pipeline | async: PipeDream-2BW, no flush between "
                 "steps, step t's gradient (taken at the weights of t-1) updates each stage on its "
                 "own")
      ->capture_default_str();
  app.add_option("--async-window", f.async_window,
                 "--update async: steps per schedule run (the bubble is paid once per window; "
                 "default 8)")
      ->check(integer_text<int>("between 1 and 1048576"));
  app.add_option("--async-delay", f.async_delay,
                 "--update async: per-microbatch (default: each micro-batch of step t uses the "
                 "newest weights its stage has when it starts: those of t-1 only for the "
                 "micro-batches that start before the stage's update of t-1, and the last stage, "
                 "whose backward follows its forward at once, keeps no second version) | "
                 "per-stage (the last stage the weights of t, the others those of t-1) | uniform "
                 "(PipeDream-2BW: every stage computes step t with the weights of t-1)");
  app.add_option("--async-momentum", f.async_momentum,
                 "--update async: lookahead (default: the optimizer's momentum in Nesterov's "
                 "form, which compensates a one-step delay) | plain (the optimizer as given)");
  // Text flags are never empty (an unset shell variable); the groups of --help.
  for (const char* name : {"--devices",
                           "--precision",
                           "--attention",
                           "--schedule",
                           "--partition",
                           "--costs",
                           "--recompute",
                           "--plan",
                           "--write-costs",
                           "--trace",
                           "--timeline",
                           "--slow-worker",
                           "--flight-recorder",
                           "--update",
                           "--sequence-parallel",
                           "--async-delay",
                           "--async-momentum",
                           "--tp-overlap",
                           "--shard",
                           "--shard-prefetch",
                           "--shard-reduce",
                           "--reshard-after-forward"})
    app.get_option(name)->check(kNotEmpty);
  set_group(app, "Parallelism",
            {"--devices",
             "--precision",
             "--attention",
             "--threads",
             "--stages",
             "--dp",
             "--tp",
             "--sequence-parallel",
             "--tp-overlap",
             "--bucket-mb",
             "--shard-optimizer",
             "--shard",
             "--shard-unit",
             "--shard-group",
             "--shard-prefetch",
             "--shard-reduce",
             "--reshard-after-forward",
             "--ps",
             "--staleness",
             "--slow-worker",
             "--update",
             "--async-window",
             "--async-delay",
             "--async-momentum",
             "--timeout"});
  set_group(app, "Schedule",
            {"--microbatches", "--schedule", "--partition", "--costs", "--mem-cap", "--recompute",
             "--plan", "--plan-top", "--plan-only", "--write-costs"});
  set_group(app, "Diagnostics", {"--trace", "--timeline", "--flight-recorder"});
}

TrainingOptions training_options(const ParallelFlags& f) {
  TrainingOptions o;
  o.devices = f.devices;
  o.precision = parse_precision(f.precision);
  o.attention = parse_attention(f.attention);
  o.threads = f.threads;
  o.stages = f.stages;
  o.dp = f.dp;
  o.tp = f.tp;
  if (f.sequence_parallel != "on" && f.sequence_parallel != "off")
    throw UsageError(
        fmt::format("--sequence-parallel {} is not a choice: use on or off", f.sequence_parallel));
  o.sequence_parallel = f.sequence_parallel == "on";
  if (f.tp_overlap != "on" && f.tp_overlap != "backward" && f.tp_overlap != "off")
    throw UsageError(
        fmt::format("--tp-overlap {} is not a choice: use on, backward or off", f.tp_overlap));
  o.tp_overlap = f.tp_overlap != "off";
  o.tp_overlap_forwards = f.tp_overlap == "on";
  o.microbatches = f.microbatches;
  o.schedule = ScheduleChoice::parse(f.schedule);
  o.partition = PartitionMethod::parse(f.partition);
  o.costs = CostSource::parse(f.costs);
  o.recompute = RecomputePolicy::parse(f.recompute);
  o.mem_cap_mib = f.mem_cap_mib;
  o.timeout_s = f.timeout;
  o.bucket_mib = f.bucket_mb;
  o.shard_optimizer = f.shard_optimizer;
  if (f.shard == "optimizer") {
    o.shard_optimizer = true;
  } else if (f.shard == "full") {
    o.shard_full = true;
  } else if (f.shard != "none") {
    throw UsageError(fmt::format(
        "--shard {} is not a choice: use none, optimizer (1/R of the optimizer state per "
        "replica) or full (1/R of parameters, gradients and optimizer state)",
        f.shard));
  }
  o.shard_unit = f.shard_unit;
  o.shard_group = f.shard_group;
  if (f.shard_prefetch != "true" && f.shard_prefetch != "false")
    throw UsageError(
        fmt::format("--shard-prefetch {} is not a choice: use true or false", f.shard_prefetch));
  o.shard_prefetch = f.shard_prefetch == "true";
  if (f.shard_reduce == "step" || f.shard_reduce == "microbatch")
    o.shard_reduce_every_microbatch = f.shard_reduce == "microbatch";
  else if (f.shard_reduce != "auto")
    throw UsageError(fmt::format("--shard-reduce {} is not a choice: use auto, step or microbatch",
                                 f.shard_reduce));
  if (f.reshard_after_forward == "true" || f.reshard_after_forward == "false")
    o.reshard_after_forward = f.reshard_after_forward == "true";
  else if (f.reshard_after_forward != "auto")
    throw UsageError(
        fmt::format("--reshard-after-forward {} is not a choice: use auto, true or false",
                    f.reshard_after_forward));
  if ((f.shard_unit != 1 || f.shard_group != 0 || f.reshard_after_forward != "auto" ||
       o.shard_prefetch || f.shard_reduce != "auto") &&
      !o.shard_full)
    throw UsageError(
        "--shard-unit, --shard-group, --shard-prefetch, --shard-reduce and "
        "--reshard-after-forward shape full sharding: add --shard full --dp R, or drop them");
  o.plan_only = f.plan_only;
  if (!f.plan.empty()) {
    if (f.plan != "auto")
      throw UsageError(fmt::format(
          "--plan {} is not a planning mode: use --plan auto, or leave --plan out and give the "
          "plan's flags",
          f.plan));
    if (!f.given.empty())
      throw UsageError(
          fmt::format("--plan auto chooses {} itself: drop {}, or drop --plan auto to use your own",
                      f.given.front(), f.given.front()));
    o.plan_auto = true;
    o.plan_top_k = f.plan_top;
  }
  o.write_costs = f.write_costs;
  if (f.ps != ParallelFlags::kNotGiven) {
    check_integer("--ps", f.ps, 1, 1024,
                  "parameter servers K; leave --ps out for none: the replicas all-reduce");
    o.ps = f.ps;
  }
  if (f.staleness != ParallelFlags::kNotGiven) {
    check_integer("--staleness", f.staleness, 0, 1'000'000, "global steps; 0: synchronous");
    o.staleness = f.staleness;
  }
  if (!f.slow_worker.empty()) {
    const size_t colon = f.slow_worker.find(':');
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      size_t used = 0;
      o.slow_replica = std::stoi(f.slow_worker.substr(0, colon), &used);
      if (used != colon || o.slow_replica < 0) throw std::invalid_argument("replica");
      const std::string factor = f.slow_worker.substr(colon + 1);
      o.slow_factor = std::stod(factor, &used);
      if (used != factor.size()) throw std::invalid_argument("factor");
    } catch (const std::exception&) {
      throw UsageError(fmt::format(
          "--slow-worker '{}' must be REPLICA:FACTOR, e.g. 1:2 (replica 1 takes twice as long)",
          f.slow_worker));
    }
  }
  o.trace = f.trace;
  o.timeline = f.timeline;
  if (f.update != "sync" && f.update != "async")
    throw UsageError("--update " + f.update +
                     " is not a mode: use --update sync or --update async");
  o.async_update = f.update == "async";
  // --async-window, --async-delay and --async-momentum mean nothing to a synchronous pipeline.
  const auto async_only = [&](std::string_view flag, const std::string& value) {
    if (!o.async_update)
      throw UsageError(fmt::format(
          "{} {} applies to --update async only (a synchronous pipeline flushes every step): add "
          "--update async or drop {}",
          flag, value, flag));
  };
  if (f.async_window != ParallelFlags::kNotGiven) {
    async_only("--async-window", std::to_string(f.async_window));
    o.async_window = f.async_window;
  }
  if (!f.async_delay.empty()) {
    async_only("--async-delay", f.async_delay);
    if (f.async_delay == async_delay_name(AsyncDelay::uniform))
      o.async_delay = AsyncDelay::uniform;
    else if (f.async_delay == async_delay_name(AsyncDelay::per_stage))
      o.async_delay = AsyncDelay::per_stage;
    else if (f.async_delay == async_delay_name(AsyncDelay::per_microbatch))
      o.async_delay = AsyncDelay::per_microbatch;
    else
      throw UsageError(fmt::format(
          "--async-delay {} is not a delay: use per-microbatch (only the micro-batches that start "
          "before their stage's previous update one step), per-stage (the last stage none, the "
          "others one step) or uniform (every stage one step, PipeDream-2BW)",
          f.async_delay));
  }
  if (!f.async_momentum.empty()) {
    async_only("--async-momentum", f.async_momentum);
    if (f.async_momentum == async_momentum_name(AsyncMomentum::lookahead))
      o.async_momentum = AsyncMomentum::lookahead;
    else if (f.async_momentum == async_momentum_name(AsyncMomentum::plain))
      o.async_momentum = AsyncMomentum::plain;
    else
      throw UsageError(fmt::format(
          "--async-momentum {} is not a form: use lookahead (Nesterov's, compensates the delay) "
          "or plain (the optimizer as given)",
          f.async_momentum));
  }
  return o;
}

}  // namespace pt::examples
