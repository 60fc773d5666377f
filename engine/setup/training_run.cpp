#include "engine/setup/training_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "engine/devices/describe_devices.h"
#include "engine/partition/tensor_parallel_costs.h"
#include "engine/setup/auto_plan.h"
#include "engine/setup/run_devices.h"
#include "engine/setup/run_engine.h"
#include "engine/update/async_update_limits.h"

namespace pt {

namespace {

// Step 1: the options, checked once, before any work.
void check_training(const TrainingOptions& opt, const TrainerConfig& config, int64_t batch,
                    Communicator* world) {
  opt.check(batch);
  if (opt.plan_auto && world)
    throw UsageError(
        "--plan auto plans the devices of one process; under mpirun give --stages, --dp, "
        "--microbatches and --schedule (a single-process --plan auto --plan-only prints them)");
  if (opt.async_update) refuse_unsupported_with_async(config.clip_norm, false);
}

// The trainer's settings with the run's M (given, or chosen by --plan auto), and the optimizer
// in the form --update async steps with (async_momentum.h).
TrainerConfig trainer_config(const TrainerConfig& config, const TrainingOptions& opt) {
  if (config.microbatches != 1 && config.microbatches != opt.microbatches)
    throw UsageError(fmt::format(
        "the trainer's config says {} micro-batches but the training options say {}: set "
        "TrainingOptions::microbatches only",
        config.microbatches, opt.microbatches));
  TrainerConfig out = config;
  out.microbatches = opt.microbatches;
  if (opt.async_update) out.optimizer = async_optimizer(config.optimizer, opt.async_momentum);
  return out;
}

// Once at start-up: what --update async changes besides removing the flush, and how to undo it
// (its defaults are the measured best, not PipeDream-2BW's definition). `used`: the optimizer it
// steps with (trainer_config), `given`: the one configured.
void say_what_async_changes(const TrainingOptions& opt, const OptimizerConfig& given,
                            const OptimizerConfig& used) {
  const bool lookahead = used.nesterov && !given.nesterov;
  fmt::print(
      "--update async: no flush between steps; {}{}; PipeDream-2BW's exact update: "
      "--async-delay uniform --async-momentum plain\n",
      opt.async_delay == AsyncDelay::per_microbatch
          ? "each micro-batch computes with the newest weights its stage has when it starts: on "
            "a stage before the last, those that start before the stage's previous update with "
            "the weights of one step before (--async-delay per-microbatch)"
      : opt.async_delay == AsyncDelay::per_stage
          ? "the last stage computes with the newest weights, the others with the weights of "
            "one step before (--async-delay per-stage)"
          : "every stage computes with the weights of one step before (--async-delay uniform)",
      lookahead ? fmt::format("; the {} momentum in its look-ahead form, which compensates that "
                              "delay (--async-momentum lookahead: nesterov=true)",
                              given.kind)
                : "");
}

// Step 3 (--plan auto): the plan searched over the devices opened for the run; its options
// replace the user's. Plans use every device as opened, unless the planner merges them into one
// device with all their threads, which is then opened in their place.
void plan_on_devices(TrainingRun& run, const Model& model, const std::function<Model()>& make_model,
                     const OptimizerConfig& optimizer, int64_t batch) {
  std::vector<Backend*> devices;
  for (auto& b : run.devices.backends) devices.push_back(b.get());
  AutoPlan a = plan_automatically(run.options, devices, model, make_model, optimizer, batch);
  run.options = a.options;
  run.auto_plan = a.chosen;
  if (a.chosen.threads > 0) {
    run.devices = {};  // the separate devices' threads go to the merged one
    run.devices = open_run_devices(run.options, nullptr);
  }
}

// What the run is, in one line and as a checkpoint records it.
void describe(TrainingRun& s, Communicator* world) {
  const TrainingOptions& opt = s.options;
  const std::string devices = describe_devices(s.backends);
  s.description = fmt::format(
      "{}{}{}{}{}", devices, world ? fmt::format(" in each of {} processes", world->size()) : "",
      opt.stages > 1 ? fmt::format(", {} stages, schedule {}, recompute {}", opt.stages,
                                   opt.schedule.str(), opt.recompute.str())
                     : "",
      opt.tp > 1 ? fmt::format(", {} tensor-parallel ranks per stage", opt.tp) : "",
      opt.ps > 0 ? fmt::format(", {} worker{} and {} parameter server{}", opt.dp * opt.stages,
                               opt.dp * opt.stages == 1 ? "" : "s", opt.ps, opt.ps == 1 ? "" : "s")
      : opt.dp > 1 && opt.shard_full
          ? fmt::format(
                ", {} data-parallel replicas (fully sharded{}: units of {} layer{} "
                "gathered for forward and backward{}, gradients reduce-scattered {}{})",
                opt.dp,
                opt.shard_group > 0 && opt.shard_group < opt.dp
                    ? fmt::format(" in groups of {}, replicated across {}", opt.shard_group,
                                  opt.dp / opt.shard_group)
                    : "",
                opt.shard_unit, opt.shard_unit == 1 ? "" : "s",
                opt.resolved_reshard_after_forward() ? "" : ", kept whole through the step",
                opt.resolved_reduce_every_microbatch() ? "after every micro-batch" : "once a step",
                opt.shard_prefetch ? ", the next unit prefetched" : "")
      : opt.dp > 1 && opt.shard_optimizer
          ? fmt::format(", {} data-parallel replicas (sharded optimizer: gradients "
                        "reduce-scattered, parameters all-gathered)",
                        opt.dp)
      : opt.dp > 1 && opt.async_update
          ? fmt::format(", {} data-parallel replicas (each stage's gradient all-reduced at its "
                        "UPDATE, no buckets)",
                        opt.dp)
      : opt.dp > 1 ? fmt::format(", {} data-parallel replicas (gradient buckets of {} MiB)", opt.dp,
                                 opt.bucket_mib)
                   : "");
  s.layout = {{"stages", std::to_string(opt.stages)},
              {"replicas", std::to_string(opt.dp)},
              {"tensor_parallel", std::to_string(opt.tp)},
              {"processes", std::to_string(world ? world->size() : 1)},
              {"devices", devices}};
}

// Step 4: the pipeline's plan for the options (given, or chosen in step 3): partition and
// schedule, its layer costs timed the way the stages run them (every device of this process at
// once, one chunk of S per device; under mpirun this process's device alone).
void plan_pipeline(TrainingRun& s, const Model& model, const std::function<Model()>& make_model,
                   const OptimizerConfig& optimizer, int64_t batch) {
  const TrainingOptions& opt = s.options;
  PlanRequest request;
  request.devices = opt.stages;
  request.microbatches = opt.microbatches;
  request.batch = batch / opt.dp;  // the costs are for one replica's micro-batch
  request.schedule = opt.schedule;
  request.partition = opt.partition;
  request.mem_cap_bytes = static_cast<int64_t>(opt.mem_cap_mib * 1024 * 1024);
  request.costs = opt.costs;
  request.optimizer_slots = optimizer.state_slots();
  request.data_parallel = opt.dp > 1;
  request.recompute = opt.recompute;
  // --tp T: the plan is one tensor rank's, on its shard (the all-reduces are not in its times).
  std::unique_ptr<TensorParallelCosts> rank;
  if (opt.tp > 1) rank = std::make_unique<TensorParallelCosts>(make_model, opt.tp, *s.backends[0]);
  const Model& planned = rank ? rank->model() : model;
  const std::function<Model()> make_planned =
      rank ? std::function<Model()>([&rank] { return rank->make_shard(); }) : make_model;
  s.plan = make_plan(planned, request, profiler_on(planned, make_planned, s.backends, opt.stages));
  if (opt.print) fmt::print("{}", s.plan->report());
  s.layout["schedule"] = opt.schedule.str();
  s.layout["microbatches"] = std::to_string(opt.microbatches);
  s.layout["layers_per_stage"] = fmt::format("{}", fmt::join(s.plan->partition.layout(), ","));
}

}  // namespace

// One pass, each step handing its result to the next: options checked, devices opened, the plan
// (given or searched), the engine with its update strategy and parallel groups.
TrainingRun make_training(const TrainingOptions& opt, Model& model,
                          const std::function<Model()>& make_model, const TrainerConfig& config,
                          int64_t batch, Communicator* world) {
  check_training(opt, config, batch, world);
  TrainingRun s;
  s.options = opt;
  if (opt.plan_auto) {
    s.devices = open_devices_to_plan(opt);
    plan_on_devices(s, model, make_model, config.optimizer, batch);
  } else {
    s.devices = open_run_devices(opt, world);
  }
  const TrainerConfig trainer = trainer_config(config, s.options);
  s.optimizer = trainer.optimizer;
  if (s.options.async_update && s.options.print && (!world || world->rank() == 0))
    say_what_async_changes(s.options, config.optimizer, trainer.optimizer);
  for (auto& b : s.devices.backends) s.backends.push_back(b.get());
  describe(s, world);
  if (!s.options.pipelined() && !world) {
    s.engine = std::make_unique<Trainer>(model, *s.backends[0], trainer);
    s.timed = s.engine.get();
    return s;
  }
  plan_pipeline(s, model, make_model, config.optimizer, batch);
  if (s.options.plan_only) return s;
  build_pipeline_engine(s, pipeline_config(s, trainer), model, make_model, world);
  return s;
}

TrainingRun make_training(const TrainingOptions& opt, const std::function<Model()>& make_model,
                          int64_t batch, const TrainerConfig& config, Communicator* world) {
  if (!make_model)
    throw UsageError("make_training: make_model is empty: pass a function that builds the model");
  auto model = std::make_unique<Model>(make_model());
  TrainingRun run = make_training(opt, *model, make_model, config, batch, world);
  run.model = std::move(model);
  return run;
}

}  // namespace pt
