// pipetrain-plan: the planner of --plan auto (engine/plan/planner.h) and its timed simulator,
// for a cluster we do not have. Nothing runs: a model given by its layer costs (a cost file, or a
// GPT's shape at a stated achieved FLOP/s) and a cluster file (devices, memory, nodes, links) in,
// the best plans out, with step time, bubble, peak memory, throughput, S x R, M, schedule and
// recomputation. At thousands of devices every candidate is estimated first and only the best
// --simulate of them are planned exactly (planner.h says how).
//
//   pipetrain-plan --gpt-layers 96 --gpt-width 12288 --context 2048 --vocab 50304 --flops 300e12
//                  --cluster cluster.txt --batch 8192     (one line)
//   pipetrain-fashion --devices cpu:0,cpu:1 --plan auto --plan-only --write-costs mlp.costs
//   pipetrain-plan --costs mlp.costs --cluster two-cpus.txt --batch 64
//
// A GPT's shape also searches tensor parallelism (T ranks per stage, T innermost: planner.h,
// tensor_parallel.h), and prints each plan's model TFLOP/s per device as Narayanan et al. 2021
// count them (gpt_costs.h), the figure of their Table 1 (scripts/megatron-table.sh).
//
// Full sharding (--shard none | full | both; engine/plan/full_shard.h): with R >= 2 a plan may
// shard its stages over the replicas (ZeRO-3 / FSDP), as --shard full --reshard-after-forward
// true runs it. Not searched by default: the table then ranks what --plan auto ranks (it does
// not shard) and what scripts/megatron-table.sh reproduces. Where a row of the table shards, two
// columns follow recompute: shard (none | full) and gathers (what the parameter all-gathers add
// to the busiest device's step), and that row's "allreduce" is its reduce-scatters after the
// pipeline. The collectives run while compute goes on (--shard-prefetch true, the default here,
// as the runtime's --shard-prefetch true and FSDP's prefetch) or each when needed (false).
// --stages 1 --shard full is FSDP alone (scripts/fsdp-crossover.sh).
//
// Left out: overlap of the all-reduces with the backward, placements other than the two of
// cluster.h, and sharding within groups of replicas only (HSDP).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/partition/cost_file.h"
#include "engine/partition/gpt_costs.h"
#include "engine/plan/cluster.h"
#include "engine/plan/planner.h"
#include "engine/plan/tensor_parallel.h"
#include "examples/common/command_line.h"
#include "examples/plan/flags.h"

namespace {

double gib(int64_t bytes) { return static_cast<double>(bytes) / (int64_t{1} << 30); }

int plan(const pt::examples::PlanFlags& f, const pt::examples::PlanChoices& choices) {
  const bool gpt = f.costs.empty();
  pt::Cluster cluster;
  if (!f.cluster.empty()) cluster = pt::read_cluster_file(f.cluster);
  double flops = f.flops;
  if (gpt && flops <= 0) {
    if (cluster.achieved_flops_per_second() <= 0)
      throw pt::UsageError(fmt::format(
          "--flops is missing and cluster file {} has no peak_tflops and achieved_fraction: give "
          "the achieved FLOP/s per device one way",
          f.cluster));
    flops = cluster.achieved_flops_per_second();
  }
  pt::CostTables tables;
  std::string source;
  if (gpt) {
    tables.by_samples[1] = pt::gpt_layer_costs(f.gpt, flops);
    source = fmt::format("GPT L={} d={} a={} T={} V={} at {:.3g} FLOP/s{}", f.gpt.layers,
                         f.gpt.width, pt::gpt_heads(f.gpt), f.gpt.context, f.gpt.vocab, flops,
                         f.flops > 0 ? std::string()
                                     : fmt::format(" ({:.0f}% of {:.0f} TFLOP/s: the cluster "
                                                   "file's)",
                                                   100 * cluster.achieved_fraction,
                                                   cluster.peak_flops_per_second / 1e12));
  } else {
    tables = pt::read_cost_file(f.costs);
    source = f.costs;
  }
  if (!f.write_costs.empty()) {
    const std::string text = pt::cost_file_text(
        tables, fmt::format("pipetrain-plan: {} (per sample: one sequence of {} tokens)", source,
                            f.gpt.context));
    pt::write_file_atomically(f.write_costs, std::as_bytes(std::span(text)));
    fmt::print("wrote the layer costs of {} ({} layers) to {}\n", source, tables.layers(),
               f.write_costs);
  }
  if (f.cluster.empty()) return 0;
  const int devices = f.devices > 0 ? f.devices : cluster.devices;
  if (devices > cluster.devices ||
      (devices > cluster.devices_per_node && devices % cluster.devices_per_node != 0))
    throw pt::UsageError(fmt::format(
        "--devices {}: cluster file {} has {} devices in nodes of {}: give at most {}, whole "
        "nodes (a multiple of {}) or part of one",
        devices, f.cluster, cluster.devices, cluster.devices_per_node, cluster.devices,
        cluster.devices_per_node));

  pt::PlannerRequest r;
  r.devices = devices;
  r.batch = f.batch;
  r.mem_cap_bytes =
      f.mem_cap_given ? static_cast<int64_t>(f.mem_cap_mib * (1 << 20)) : cluster.memory_bytes;
  r.optimizer_slots = f.optimizer_slots;
  r.schedules = choices.schedules;
  r.recompute = choices.recompute;
  r.heads = gpt ? pt::gpt_heads(f.gpt) : 0;
  r.tensor_parallel = choices.tensor_parallel.empty()
                          ? pt::tensor_parallel_degrees(devices, cluster.devices_per_node, r.heads,
                                                        cluster.devices_per_node)
                          : choices.tensor_parallel;
  r.max_microbatches = f.max_microbatches;
  r.transfer_bytes_per_second = cluster.intra_node.bytes_per_second;
  r.transfer_latency_s = cluster.intra_node.latency_s;
  r.allreduce_bytes_per_second = cluster.intra_node_allreduce.bytes_per_second;
  r.allreduce_latency_s = cluster.intra_node_allreduce.latency_s;
  r.devices_per_node = cluster.devices_per_node;
  r.inter_node = cluster.inter_node;
  r.simulate_top = f.simulate;
  r.overheads = tables.epilogue;
  r.stages = choices.stages;
  r.shard = choices.shard;
  r.shard_prefetch = f.shard_prefetch == "true";

  const auto t0 = std::chrono::steady_clock::now();
  const pt::PlannerResult res = [&] {
    try {
      if (gpt)
        return pt::search_plans(pt::ShardedCostsFor([&](int64_t mb, int T) {
                                  return pt::gpt_sharded_costs(f.gpt, flops, T, f.sequence_parallel,
                                                               mb);
                                }),
                                r);
      return pt::search_plans([&](int64_t mb) { return tables.for_samples(mb); }, r);
    } catch (const pt::UsageError& e) {
      // The planner names the cap --mem-cap; without that flag the cap is the cluster file's.
      const std::string_view msg = e.what();
      constexpr std::string_view kFlag = "--mem-cap ";
      if (f.mem_cap_given || !msg.starts_with(kFlag)) throw;
      std::string said(msg.substr(kFlag.size()));
      constexpr std::string_view kRaise = "raise --mem-cap to";
      for (size_t at; (at = said.find(kRaise)) != std::string::npos;)
        said.replace(at, kRaise.size(),
                     "plan for more memory per device (memory_gib in the cluster file, or "
                     "--mem-cap MiB): at least");
      throw pt::UsageError(fmt::format(
          "the memory per device of cluster file {} (memory_gib; no --mem-cap given), {}",
          f.cluster, said));
    }
  }();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  fmt::print(
      "pipetrain-plan: {} devices ({} per node; links {:.0f} GB/s + {:.1f} us within a node, "
      "{:.0f} GB/s + {:.1f} us between), cap {:.1f} GiB per device, batch {}, costs {} ({} "
      "layers)\n",
      devices, cluster.devices_per_node, cluster.intra_node.bytes_per_second / 1e9,
      cluster.intra_node.latency_s * 1e6, cluster.inter_node.bytes_per_second / 1e9,
      cluster.inter_node.latency_s * 1e6, gib(r.mem_cap_bytes), f.batch, source, tables.layers());
  fmt::print(
      "step epilogue (zeroing, norm, optimizer update): {}\n",
      r.overheads.serial_s_per_param > 0 || r.overheads.update_s_per_param > 0
          ? fmt::format("{:.3g} + {:.3g} ns per parameter (the cost file's)",
                        r.overheads.serial_s_per_param * 1e9, r.overheads.update_s_per_param * 1e9)
          : std::string("not modelled (no 'epilogue' line in the costs)"));
  std::string degrees, shards;
  for (const int T : r.tensor_parallel)
    degrees += fmt::format("{}{}", degrees.empty() ? "" : ",", T);
  for (const pt::ShardChoice s : r.shard)
    shards += fmt::format("{}{}", shards.empty() ? "" : ",", pt::shard_name(s));
  const bool searched_full =
      std::find(r.shard.begin(), r.shard.end(), pt::ShardChoice::full) != r.shard.end();
  fmt::print(
      "searched {} plans (T in {}{}, S in {}, shard {}{}, M <= {}), {} {} exactly, in {:.2f} s\n",
      res.considered, degrees, f.sequence_parallel ? " with sequence parallelism" : "",
      f.stages.empty() ? std::string("any") : f.stages, shards,
      !searched_full     ? ""
      : r.shard_prefetch ? " with prefetch"
                         : " without prefetch",
      f.max_microbatches, f.simulate > 0 ? "estimated all, simulated the best" : "simulated",
      res.simulated, wall);
  // TFLOP/s: Narayanan et al.'s count of the step's FLOPs (gpt_costs.h) / step / devices.
  const double model_flops = gpt ? pt::narayanan_flops_per_step(f.gpt, f.batch) : 0;
  const size_t rows = std::min(res.ranked.size(), static_cast<size_t>(f.top));
  // shard and gathers only where a row shards: the columns before stay where scripts read them.
  const bool sharded_rows =
      std::any_of(res.ranked.begin(), res.ranked.begin() + static_cast<std::ptrdiff_t>(rows),
                  [](const pt::PlanCandidate& c) { return c.shard == pt::ShardChoice::full; });
  fmt::print("{:>4}  {:>10}  {:>7}  {:>9}  {:>10}  {:>8}  {:>10}  {:<10} {:>15} {:>5}  {:<14} {}\n",
             "rank", "step (ms)", "bubble", "peak GiB", "samples/s", "TFLOP/s", "allreduce",
             "neighbours", "T x S x R", "M", "schedule",
             sharded_rows ? fmt::format("{:<12} {:<5} {:>10}", "recompute", "shard", "gathers")
                          : std::string("recompute"));
  for (size_t i = 0; i < rows; ++i) {
    const pt::PlanCandidate& c = res.ranked[i];
    fmt::print(
        "{:>4}  {:>10.3f}  {:>6.1f}%  {:>9.2f}  {:>10.1f}  {:>8}  {:>8.3f}ms  {:<10} {:>15} {:>5}  "
        "{:<14} {}\n",
        i + 1, c.step_s * 1e3, 100 * c.bubble, gib(c.max_peak_bytes()),
        static_cast<double>(f.batch) / c.step_s,
        gpt ? fmt::format("{:.1f}", model_flops / c.step_s / devices / 1e12) : std::string("-"),
        c.allreduce_s * 1e3, pt::placement_name(c.placement),
        fmt::format("{} x {} x {}", c.tensor_parallel, c.stages, c.replicas), c.microbatches,
        c.schedule,
        sharded_rows ? fmt::format("{:<12} {:<5} {:>8.3f}ms", c.recompute.str(),
                                   pt::shard_name(c.shard), c.gather_s * 1e3)
                     : c.recompute.str());
  }
  if (f.simulate > 0) {  // how far the estimates that chose the finalists were off
    double worst = 0;
    for (const pt::PlanCandidate& c : res.ranked)
      worst = std::max(worst, std::abs(c.estimate_s / c.step_s - 1));
    fmt::print("the {} simulated plans' estimates were within {:.1f}% of their simulation\n",
               res.ranked.size(), 100 * worst);
  }
  for (const pt::PlanRejection& j : res.rejected)
    fmt::print("rejected {} ({} plan{}): {}, e.g. {}\n", j.schedule, j.count,
               j.count == 1 ? "" : "s", j.why, j.example);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pipetrain-plan: the planner and simulator for a cluster given as a file"};
  pt::examples::PlanFlags f;
  pt::examples::add_plan_flags(app, f);
  if (const int code = pt::examples::parse_command_line(app, argc, argv); code >= 0) return code;
  try {
    return plan(f, pt::examples::check_plan_flags(f));
  } catch (const pt::UsageError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
