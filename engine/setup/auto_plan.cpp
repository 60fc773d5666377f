#include "engine/setup/auto_plan.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "engine/devices/devices.h"
#include "engine/io/atomic_file.h"
#include "engine/partition/cost_file.h"
#include "engine/partition/layer_costs.h"
#include "engine/partition/on_every_device.h"
#include "engine/partition/step_overheads.h"
#include "engine/partition/tensor_parallel_costs.h"

namespace pt {

namespace {

// The third way to use CPU devices, beside stages and replicas: one device with all their
// threads (computes_on_host_cores). Profiled on that device and searched like the others (one
// device: M only); reported beside the table, whose plans all use the devices as given (and
// which a cost file reproduces). Only measured costs can tell threads from devices, so the
// caller asks only when profiling. `threads`: all the devices' together.
PlanCandidate one_device_with_all_threads(const Backend& first, int threads, const Model& model,
                                          const PlannerRequest& request,
                                          const OptimizerConfig& optimizer, int64_t measured_params,
                                          Precision precision, AttentionKernel attention) {
  DeviceSet one = open_devices(first.device().str(), 1, threads, precision, attention);
  Backend& device = *one.backends[0];
  PlannerRequest alone = request;
  alone.devices = 1;
  alone.tensor_parallel = {1};
  alone.overheads = measure_step_overheads({&device}, optimizer, measured_params);
  const PlannerResult r = search_plans(
      [&](int64_t microbatch) { return profile_costs(model, device, microbatch); }, alone);
  PlanCandidate c = r.ranked.front();
  c.threads = threads;
  return c;
}

}  // namespace

std::pair<TrainingOptions, std::string> options_for_plan(const TrainingOptions& given,
                                                         const PlanCandidate& chosen,
                                                         const ScheduleChoice& schedule,
                                                         const Backend& first) {
  TrainingOptions o = given;
  o.schedule = schedule;
  if (chosen.threads > 0) {
    o.devices = first.device().str();
    o.threads = chosen.threads;
  }
  o.plan_auto = false;
  o.write_costs.clear();  // written by the search; the chosen plan's run writes nothing
  o.stages = chosen.stages;
  o.dp = chosen.replicas;
  o.tp = chosen.tensor_parallel;
  o.microbatches = chosen.microbatches;
  o.recompute = chosen.recompute;
  o.partition = {PartitionMethod::Kind::layout, chosen.layout};
  // Full sharding as the planner priced it (engine/plan/full_shard.h): units dropped after
  // forward, one reduce-scatter a step, no prefetch; given explicitly, not left to the auto
  // choices, so that the run is the plan.
  o.shard_full = chosen.shard == ShardChoice::full;
  if (o.shard_full) {
    o.reshard_after_forward = true;
    o.shard_reduce_every_microbatch = false;
    o.shard_prefetch = false;
  }
  // The partitioner's own cap check does not count recomputation; the planner checked the cap
  // with it (recompute_cost.h), so the cap is passed on only where both models agree.
  if (chosen.recompute.kind != RecomputePolicy::Kind::never) o.mem_cap_mib = 0;
  std::string flags = fmt::format(
      "--devices {}{} --stages {} --dp {}{} --microbatches {} --schedule {} --recompute {} "
      "--partition {}{}{}{}",
      o.devices, chosen.threads > 0 ? fmt::format(" --threads {}", o.threads) : "", o.stages, o.dp,
      o.tp > 1 ? fmt::format(" --tp {}", o.tp) : "", o.microbatches, o.schedule.str(),
      o.recompute.str(), o.partition.str(),
      o.shard_full ? " --shard full --reshard-after-forward true --shard-reduce step" : "",
      o.mem_cap_mib > 0 ? fmt::format(" --mem-cap {}", o.mem_cap_mib) : "",
      given.costs.kind == CostSource::Kind::profile ? " --costs profile" : "");
  return {std::move(o), std::move(flags)};
}

AutoPlan plan_automatically(const TrainingOptions& opt, const std::vector<Backend*>& devices,
                            const Model& model, const std::function<Model()>& make_model,
                            const OptimizerConfig& optimizer, int64_t batch) {
  const std::vector<Backend*>& all = devices;
  PlannerRequest request;
  request.devices = static_cast<int>(devices.size());
  request.batch = batch;
  request.mem_cap_bytes = static_cast<int64_t>(opt.mem_cap_mib * 1024 * 1024);
  request.optimizer_slots = optimizer.state_slots();
  // Full sharding beside holding stages whole, its collectives waited for where needed: the
  // runtime's --shard-prefetch defaults to false here (its thread competes for the cores).
  request.shard = {ShardChoice::none, ShardChoice::full};
  request.shard_prefetch = false;
  Backend& first = *devices.at(0);
  const bool profiling = opt.costs.kind == CostSource::Kind::profile;
  const std::string every = every_device_at_once(all);
  const LayerProfiler profiler = profiler_on(model, make_model, all);
  const std::string& profiled_on = profiler.where;
  // The epilogue and the all-reduce are measured on arrays the size of the model's parameters
  // (at most 2^24: the rate per parameter is what the planner uses).
  const int64_t measured_params = std::clamp<int64_t>(model.param_count(), 1, int64_t{1} << 24);
  std::string overheads_how = "estimated from bytes";
  std::string allreduce_how = "stated, not measured";
  if (profiling) {
    request.overheads = measure_step_overheads(all, optimizer, measured_params);
    overheads_how = fmt::format("measured on {}", every);
    if (all.size() > 1) {
      const AllReduceRate rate =
          measure_in_process_allreduce(all, measured_params * static_cast<int64_t>(sizeof(float)));
      request.allreduce_bytes_per_second = rate.bytes_per_second;
      request.allreduce_latency_s = rate.latency_s;
      allreduce_how = fmt::format("measured in-process on {}", every);
    }
  } else {
    request.overheads = estimate_step_overheads(request.optimizer_slots);
  }
  CostTables used;  // for --write-costs
  const CostsFor costs = [&](int64_t microbatch) {
    std::vector<LayerProfile> c =
        profiling ? profiler.measure(microbatch) : estimate_costs(model, microbatch);
    used.by_samples[microbatch] = c;
    return c;
  };
  // Tensor parallelism: every T dividing the devices that the model splits into (shard_model
  // checks its heads, widths and vocabulary), with estimated costs of one rank and its counted
  // all-reduces (tensor_parallel_costs.h). Profiling a shard is not built: --costs profile
  // plans T = 1.
  std::vector<std::unique_ptr<TensorParallelCosts>> sharded;
  std::vector<std::string> refused_degrees;
  request.tensor_parallel = {1};
  request.heads = 1;
  for (int T = 2; !profiling && T <= request.devices; ++T) {
    if (request.devices % T != 0) continue;
    try {
      sharded.push_back(std::make_unique<TensorParallelCosts>(make_model, T, first));
    } catch (const ShapeError& e) {
      refused_degrees.push_back(fmt::format("T = {}: {}", T, e.what()));
      continue;
    }
    request.tensor_parallel.push_back(T);
    request.heads = std::lcm(request.heads, T);  // every T kept divides it (checked above)
  }
  const ShardedCostsFor sharded_costs = [&](int64_t microbatch, int T) {
    if (T == 1) return unsharded(costs(microbatch));
    for (const auto& c : sharded)
      if (c->ranks() == T) return c->costs(microbatch);
    throw std::logic_error("plan auto: no costs for this tensor-parallel degree");
  };
  AutoPlan a;
  a.result = search_plans(sharded_costs, request);
  if (!opt.write_costs.empty()) {
    used.epilogue = request.overheads;
    const std::string text = cost_file_text(
        used,
        fmt::format("layer costs --plan auto planned with ({}, {} layers); its all-reduce, "
                    "as cluster-file lines ({}):\nallreduce_gb_per_s {}\nallreduce_latency_us {}",
                    profiling ? fmt::format("profiled on {}", profiled_on)
                              : std::string("estimated from FLOPs and bytes"),
                    model.num_layers(), allreduce_how, request.allreduce_bytes_per_second / 1e9,
                    request.allreduce_latency_s * 1e6));
    write_file_atomically(opt.write_costs, std::as_bytes(std::span(text)));
    if (opt.print) fmt::print("plan auto: wrote the layer costs to {}\n", opt.write_costs);
  }
  const bool can_merge = all.size() > 1 && std::all_of(all.begin(), all.end(), [](Backend* b) {
                           return b->computes_on_host_cores();
                         });
  int merged_threads = 0;
  for (Backend* b : all) merged_threads += b->num_threads();
  std::optional<PlanCandidate> merged;
  if (can_merge && profiling)
    merged = one_device_with_all_threads(first, merged_threads, model, request, optimizer,
                                         measured_params, opt.precision, opt.attention);
  // The registry and ScheduleChoice are kept in step; a name only the registry knows cannot be
  // run, so it is passed over (and said so) rather than chosen.
  std::optional<ScheduleChoice> schedule;
  for (const PlanCandidate& c : a.result.ranked) {
    try {
      schedule = ScheduleChoice::parse(c.schedule);
    } catch (const UsageError& e) {
      if (opt.print) fmt::print("plan auto: passing over {}: {}\n", c.schedule, e.what());
      continue;
    }
    a.chosen = c;
    break;
  }
  if (a.chosen.schedule.empty())
    throw UsageError("--plan auto: no planned schedule can be run by this program");
  const double separate_s = a.chosen.step_s;
  if (merged && merged->step_s < a.chosen.step_s) {
    a.chosen = *merged;
    schedule = ScheduleChoice::parse(merged->schedule);
  }
  std::tie(a.options, a.flags) = options_for_plan(opt, a.chosen, *schedule, first);
  if (opt.print) {
    fmt::print("{}", a.result.report(opt.plan_top_k));
    if (profiling)
      fmt::print("plan auto: --costs profile plans --tp 1 only (a shard is not profiled yet)\n");
    for (const std::string& why : refused_degrees)
      fmt::print("plan auto: tensor parallelism {}\n", why);
    fmt::print(
        "plan auto: costs {}, {} device{}, batch {}; all-reduce {:.1f} GB/s + {:.0f} us per ring "
        "step ({}); epilogue {:.2f} ns per parameter of the replica (gradient norm) + {:.2f} ns "
        "per parameter of the fullest device (optimizer update) ({})\n",
        profiling ? fmt::format("profiled on {}", profiled_on)
                  : std::string("estimated from FLOPs and bytes"),
        request.devices, request.devices == 1 ? "" : "s", batch,
        request.allreduce_bytes_per_second / 1e9, request.allreduce_latency_s * 1e6, allreduce_how,
        request.overheads.serial_s_per_param * 1e9, request.overheads.update_s_per_param * 1e9,
        overheads_how);
    if (merged)
      fmt::print(
          "plan auto: one device with all {} threads ({}): best M = {}, predicted {:.2f} ms per "
          "step ({:.2f} compute + {:.2f} norm and update), against {:.2f} for the best "
          "plan of the {} devices as given\n",
          merged->threads, first.device().str(), merged->microbatches, merged->step_s * 1e3,
          merged->pipeline_s * 1e3, merged->epilogue_s * 1e3, separate_s * 1e3, all.size());
    else if (can_merge)
      fmt::print(
          "plan auto: with --costs profile it also weighs one device with all {} threads "
          "(estimated costs cannot tell threads from devices)\n",
          merged_threads);
    fmt::print(
        "plan auto chose {} (predicted {:.2f} ms per step); to run it again without the "
        "search:\n  {}\n",
        a.chosen.threads > 0
            ? fmt::format("one device with {} threads", a.chosen.threads)
            : fmt::format("{} x {}{}, M = {}, {}", a.chosen.stages, a.chosen.replicas,
                          a.chosen.tensor_parallel > 1
                              ? fmt::format(" x {} tensor ranks", a.chosen.tensor_parallel)
                              : "",
                          a.chosen.microbatches, a.chosen.schedule),
        a.chosen.step_s * 1e3, a.flags);
  }
  return a;
}

}  // namespace pt
