#include "examples/plan/flags.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "engine/io/output_path.h"
#include "engine/plan/planner.h"
#include "examples/common/command_line.h"
#include "examples/common/integer_text.h"

namespace pt::examples {

void add_plan_flags(CLI::App& app, PlanFlags& f) {
  app.add_option("--costs", f.costs,
                 "layer-cost file (engine/partition/cost_file.h); default: none, give it or a "
                 "GPT's shape")
      ->check(kNotEmpty);
  app.add_option("--write-costs", f.write_costs,
                 "write the GPT's layer costs to this file; missing folders above it are created "
                 "(default: none)")
      ->check(kNotEmpty);
  app.add_option("--cluster", f.cluster,
                 "cluster file (engine/plan/cluster.h); default: none, needed to plan")
      ->check(kNotEmpty);
  app.add_option("--gpt-layers", f.gpt.layers, "GPT: transformer blocks L (default: none)")
      ->check(integer_text<int>(">= 1"));
  app.add_option("--gpt-width", f.gpt.width, "GPT: width d (default: none)")
      ->check(integer_text<int64_t>(">= 1"));
  app.add_option("--context", f.gpt.context, "GPT: tokens per sample T (default: none)")
      ->check(integer_text<int64_t>(">= 1"));
  app.add_option("--vocab", f.gpt.vocab, "GPT: vocabulary V (default: none)")
      ->check(integer_text<int64_t>(">= 1"));
  app.add_option("--flops", f.flops,
                 "GPT: achieved FLOP/s per device, e.g. 300e12 (default: the cluster file's "
                 "peak_tflops x achieved_fraction)");
  app.add_option("--heads", f.gpt.heads, "GPT: attention heads a (default: d / 128)")
      ->check(integer_text<int>("between 1 and 2^20"));
  for (const char* name : {"--gpt-layers", "--gpt-width", "--context", "--vocab", "--flops"})
    app.get_option(name)->each([&f, name](const std::string&) { f.gpt_given.emplace_back(name); });
  app.add_option("--devices", f.devices,
                 "plan for this many of the cluster's devices, whole nodes (default: all)")
      ->check(integer_text<int>(">= 1"));
  app.add_option("--tensor-parallel", f.tensor_parallel,
                 "tensor-parallel degrees T to search, comma-separated, or auto: every T that "
                 "divides the heads and the devices per node (a cost file: 1)")
      ->capture_default_str()
      ->check(kNotEmpty);
  app.add_flag("--sequence-parallel", f.sequence_parallel,
               "GPT: shard the activations outside attention and the MLP over the T ranks too "
               "(Korthikanti et al. 2022; default: off, as Megatron in 2021)");
  app.add_option("--stages", f.stages,
                 "pipeline stage counts S to search, comma-separated (default: every S that "
                 "divides the devices / T)")
      ->check(kNotEmpty);
  app.add_option("--shard", f.shard,
                 "full sharding (ZeRO-3 / FSDP) of the stages over the R replicas to search: none "
                 "(as --plan auto, which does not shard), full (only candidates with R >= 2) or "
                 "both")
      ->capture_default_str()
      ->check(kNotEmpty);
  app.add_option("--shard-prefetch", f.shard_prefetch,
                 "full sharding: true gathers the next unit while this one computes and "
                 "reduce-scatters in the background (as the runtime's --shard-prefetch true and "
                 "FSDP); false waits for every collective where it is needed")
      ->capture_default_str();
  app.add_option("--recompute", f.recompute,
                 "recompute policies to search, comma-separated (never, except_last, always, "
                 "every:K; default: never, except_last, always)")
      ->check(kNotEmpty);
  app.add_option("--batch", f.batch, "global batch B in samples (default: none, needed to plan)")
      ->check(integer_text<int64_t>("between 1 and 2^40"));
  app.add_option("--mem-cap", f.mem_cap_mib,
                 "memory per device in MiB (default: the cluster's; 0: no cap)")
      ->each([&f](const std::string&) { f.mem_cap_given = true; });
  app.add_option("--top", f.top, "rows of the table")
      ->capture_default_str()
      ->check(integer_text<int>("between 1 and 10000"));
  app.add_option("--schedules", f.schedules, "comma-separated schedules to search (default: all)")
      ->check(kNotEmpty);
  app.add_option("--max-microbatches", f.max_microbatches,
                 "M among the divisors of B / R up to this")
      ->capture_default_str()
      ->check(integer_text<int>("between 1 and 65536"));
  app.add_option("--optimizer-slots", f.optimizer_slots,
                 "optimizer state per parameter: SGD 0, momentum 1, AdamW 2")
      ->capture_default_str()
      ->check(integer_text<int>("between 0 and 8"));
  app.add_option(
         "--simulate", f.simulate,
         "plan exactly (full timed simulation) the best N of the estimates (0: every candidate, as "
         "--plan auto)")
      ->capture_default_str()
      ->check(integer_text<int>("between 0 and 1000"));
  set_group(app, "Model",
            {"--costs", "--write-costs", "--gpt-layers", "--gpt-width", "--context", "--vocab",
             "--heads", "--flops", "--optimizer-slots"});
  set_group(app, "Parallelism",
            {"--cluster", "--devices", "--mem-cap", "--batch", "--tensor-parallel",
             "--sequence-parallel", "--stages", "--shard", "--shard-prefetch"});
  set_group(app, "Schedule",
            {"--schedules", "--recompute", "--max-microbatches", "--simulate", "--top"});
}

namespace {

// "a,b,c" -> {"a", "b", "c"} (an empty item stays, for the caller to refuse).
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// "1,2,4" -> {1, 2, 4}; anything but whole numbers >= 1 is refused naming `flag` and `what`.
std::vector<int> whole_numbers(const char* flag, const std::string& text, const char* what) {
  std::vector<int> out;
  for (const std::string& item : split_commas(text)) {
    const bool digits =
        !item.empty() && item.size() <= 7 &&
        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || std::stoi(item) < 1)
      throw UsageError(fmt::format("{}: '{}' is not {}", flag, item, what));
    out.push_back(std::stoi(item));
  }
  return out;
}

std::vector<int> tensor_parallel_list(const std::string& text) {
  if (text == "auto") return {};
  return whole_numbers("--tensor-parallel", text,
                       "a degree: give auto or whole numbers >= 1, e.g. 1,2,4,8");
}

}  // namespace

PlanChoices check_plan_flags(const PlanFlags& f) {
  const bool gpt = !f.gpt_given.empty();
  if (gpt && !f.costs.empty())
    throw UsageError("--costs FILE and --gpt-layers ... are two sources of layer costs: give one");
  if (!gpt && f.costs.empty())
    throw UsageError(
        "no layer costs: give --costs FILE (e.g. written by pipetrain-fashion --plan auto "
        "--plan-only --write-costs FILE), or a GPT's --gpt-layers L --gpt-width d --context T "
        "--vocab V --flops F");
  if (gpt) {
    for (const auto& [flag, v] : {std::pair{"--gpt-layers", static_cast<double>(f.gpt.layers)},
                                  {"--gpt-width", static_cast<double>(f.gpt.width)},
                                  {"--context", static_cast<double>(f.gpt.context)},
                                  {"--vocab", static_cast<double>(f.gpt.vocab)},
                                  {"--flops", f.flops}})
      if (std::find(f.gpt_given.begin(), f.gpt_given.end(), flag) == f.gpt_given.end()) {
        // With a cluster file the achieved FLOP/s may be its (checked once it is read).
        if (flag == std::string_view("--flops") && !f.cluster.empty()) continue;
        throw UsageError(fmt::format(
            "{} is missing: a GPT's costs need --gpt-layers, --gpt-width, --context, --vocab and "
            "--flops (or, with --cluster, the file's peak_tflops and achieved_fraction)",
            flag));
      } else if (!(std::isfinite(v) && v > 0))
        throw UsageError(fmt::format("{} {} must be a finite number > 0 ({})", flag, v,
                                     flag == std::string_view("--flops")
                                         ? "achieved FLOP/s per device, e.g. 300e12"
                                         : "a GPT's size"));
  }
  if (!f.write_costs.empty()) check_output_path(f.write_costs, "--write-costs");
  if (!f.write_costs.empty() && !gpt)
    throw UsageError("--write-costs writes a GPT's costs: give --gpt-layers ... too, or drop it");
  if (f.cluster.empty() && f.write_costs.empty())
    throw UsageError(
        "--cluster FILE is missing: the devices, their memory and links to plan for "
        "(engine/plan/cluster.h)");
  if (f.cluster.empty()) return {};
  PlanChoices out;
  out.tensor_parallel = tensor_parallel_list(f.tensor_parallel);
  if (!f.stages.empty())
    out.stages =
        whole_numbers("--stages", f.stages, "a stage count: give whole numbers >= 1, e.g. 1,2,4");
  if (f.shard == "none" || f.shard == "both") out.shard.push_back(ShardChoice::none);
  if (f.shard == "full" || f.shard == "both") out.shard.push_back(ShardChoice::full);
  if (out.shard.empty())
    throw UsageError(fmt::format("--shard {}: give none, full or both", f.shard));
  if (f.shard_prefetch != "true" && f.shard_prefetch != "false")
    throw UsageError(
        fmt::format("--shard-prefetch {} is not a choice: use true or false", f.shard_prefetch));
  if (!gpt &&
      (f.sequence_parallel || std::any_of(out.tensor_parallel.begin(), out.tensor_parallel.end(),
                                          [](int T) { return T > 1; })))
    throw UsageError(
        "--tensor-parallel > 1 and --sequence-parallel need to know how the layers shard: a "
        "cost file does not say; give a GPT's shape (--gpt-layers ... --heads) instead");
  if (!f.recompute.empty())
    for (const std::string& item : split_commas(f.recompute))
      out.recompute.push_back(RecomputePolicy::parse(item));
  if (f.batch < 1 || f.batch > (int64_t{1} << 40))
    throw UsageError(
        fmt::format("--batch {} must be 1 to 2^40 samples (the global batch)", f.batch));
  const auto in = [](const char* flag, int v, int lo, int hi) {
    if (v < lo || v > hi) throw UsageError(fmt::format("{} {} must be {} to {}", flag, v, lo, hi));
  };
  in("--top", f.top, 1, 10000);
  in("--max-microbatches", f.max_microbatches, 1, 65536);
  in("--optimizer-slots", f.optimizer_slots, 0, 8);
  in("--simulate", f.simulate, 0, 1000);
  in("--devices", f.devices, 0, 1 << 20);
  if (!std::isfinite(f.mem_cap_mib) || f.mem_cap_mib < 0 || f.mem_cap_mib > double(1 << 30))
    throw UsageError(fmt::format("--mem-cap {} must be 0 to 2^30 MiB (0: no cap)", f.mem_cap_mib));
  if (f.schedules.empty()) return out;
  const std::vector<std::string> valid = planner_schedule_names();
  for (const std::string& name : split_commas(f.schedules)) {
    bool known = std::find(valid.begin(), valid.end(), name) != valid.end();
    if (!known && name.starts_with("interleaved:")) {  // any V >= 2
      const std::string v = name.substr(12);
      known = !v.empty() && v.size() <= 3 &&
              std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
              std::stoi(v) >= 2;
    }
    if (!known)
      throw UsageError(
          fmt::format("--schedules: unknown schedule '{}': valid are {} (and "
                      "interleaved:V for any V >= 2)",
                      name, fmt::join(valid, ", ")));
    out.schedules.push_back(name);
  }
  return out;
}

}  // namespace pt::examples
