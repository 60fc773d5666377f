// bench/full_shard: throughput and per-device peak memory of full sharding (--shard full;
// ZeRO-3, FSDP) against plain data parallelism, ZeRO-1 and a pipeline on this machine's cores
// (issue 35). One process, virtual CPU devices of 1 thread each, AdamW, no clipping, the same
// model and the same global batch for every setup: by default deep_mlp(6, 1024) (784-1024x6-10,
// 6.0 M parameters: 23 MiB each of parameters and gradients, 46 MiB of AdamW moments, against
// about 3 MiB of activations and temporaries at its peak), batch 256, M = 4 micro-batches per
// replica.
//
// ---- the setups -------------------------------------------------------------------------------
// Each built by make_local_data_parallel, 1f1b, R replicas x S stages (R S devices):
//   "single device"                          R = 1, S = 1
//   "DP R=2"                                 R = 2, gradients all-reduced in buckets (--dp 2)
//   "ZeRO-1 R=2"                             + --shard-optimizer: each replica steps half of
//                                            the optimizer state, gradients reduce-scattered
//   "full shard R=2"                         --shard full: parameters, gradients and optimizer
//                                            state halved, each layer's unit gathered around
//                                            its forward and again around its backward
//   "full shard R=2, kept after forward"     the same with reshard_after_forward = false: a
//                                            unit gathered for its forward stays until the
//                                            step's end (one gather per unit, more memory)
//   "full shard R=2, reduce every micro-batch"  --shard-reduce microbatch (pipetrain's
//                                            default without stages, FSDP2's): gradients
//                                            reduce-scattered after each micro-batch, so they
//                                            are never whole for the step; the others above
//                                            reduce once a step (bit-identical to DP)
//   "pipeline S=2"                           R = 1, S = 2 (layers split evenly: both stages
//                                            hold about half of the model's FLOPs)
//   "pipeline S=2 x full shard R=2"          S = 2 x R = 2 with --shard full: 4 devices, so
//                                            on 2 cores 4 threads share them (oversubscribed:
//                                            the line says so; its time is not a speedup
//                                            the hardware could give, its memory is)
// Every setup runs the same M, so the data-parallel ones split each micro-batch the same way.
//
// ---- the checks (verify first) ----------------------------------------------------------------
// The first step's loss of every R = 2 setup must equal DP's bit for bit: the same model, the
// same data, and sharding changes where sums run, not their order (unit_shards.h); so must the
// R = 1 pipeline's equal the single device's. And after it full sharding's held bytes
// (parameters + gradients + optimizer state, between steps) must be at most DP's / 2 plus
// padding: each unit's part is padded to R equal pieces (at most R - 1 floats) and its table
// entry to kArenaAlignment bytes, per unit and kind (parameters, gradients, each optimizer
// slot). Either failing prints the check lines, says why on stderr and exits 1.
//
// ---- the output (JSON lines) ------------------------------------------------------------------
//   {"bench":"full_shard_config", "model", "params", ...}
//   {"bench":"full_shard_check", "setup", "first_loss", "reference", "same_first_loss",
//    "held_bytes", "held_bytes_dp", "held_bound_bytes", "held_within_bound" (full sharding)}
// After --warmup steps each, --steps rounds; a round times one step of every setup in turn, so
// a change in the machine's load hits all of them alike. Per setup:
//   {"bench":"full_shard_step", "setup", "devices", "replicas", "stages", "shard",
//    "reshard_after_forward" (read with shard "full" only), "threads_per_device", "cores",
//    "oversubscribed" (devices > cores), "step_ms" (+ _min, _max),
//    "samples_per_s" (+ _min, _max), "peak_bytes_per_device", "peak_bytes_any_device",
//    "held_parameter_bytes", "held_gradient_bytes", "held_optimizer_bytes",
//    "gathered_peak_bytes", "reps"}
//   peak_bytes_per_device: the largest of replica 0's devices' peaks during the last step (the
//     CPU backend counts every allocation: held state, activations, gathered units, buffers);
//     peak_bytes_any_device: the same over every replica (ZeRO-1's ranges of whole tensors
//     are not exactly equal).
//   held_*: what replica 0 holds between steps, summed over its S devices; gathered_peak: the
//     most gathered parameters and gradients at once in the last step (full sharding; else 0).
// and against DP, measured in this run:
//   {"bench":"full_shard_ratio", "setup", "baseline", "speedup" (+ _min, _max),
//    "speedup_of_medians", "peak_ratio", "held_ratio", "reps"}
//   speedup: each round's DP step time over the setup's (the samples/s ratio), median and
//   spread; peak_ratio: the setup's peak_bytes_per_device over DP's; held_ratio: the same for
//   the held total.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/positive.h"
#include "bench/repeated_seconds.h"
#include "bench/synthetic_batch.h"
#include "engine/core/arena.h"
#include "engine/data/batching.h"
#include "engine/parallel/full_shard/unit_shards.h"
#include "engine/replicas/data_parallel_trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"

namespace {

using pt::bench::Spread;
using Clock = std::chrono::steady_clock;

struct Flags {
  int hidden_layers = 6;
  int64_t width = 1024, batch = 256;
  int microbatches = 4;
  int steps = 20, warmup = 2;
  bool quick = false;
};

pt::Model make_model(const Flags& f) { return pt::deep_mlp(f.hidden_layers, f.width); }

enum class Shard { none, optimizer, full };

const char* shard_name(Shard s) {
  return s == Shard::none ? "none" : s == Shard::optimizer ? "optimizer" : "full";
}

struct Setup {
  std::string name;
  int replicas = 1, stages = 1;
  Shard shard = Shard::none;
  bool reshard_after_forward = true;
  bool reduce_every_microbatch = false;  // --shard-reduce microbatch
  std::vector<std::unique_ptr<pt::Backend>> owned;
  std::unique_ptr<pt::DataParallelTrainer> trainer;
  double first_loss = 0;
  std::vector<double> step_s;  // one per round

  int devices() const { return replicas * stages; }
};

pt::PipelineConfig pipeline_config(const Flags& f, const Setup& s) {
  pt::PipelineConfig pc;
  pc.trainer.microbatches = f.microbatches;
  pc.trainer.optimizer.kind = "adamw";
  pc.trainer.optimizer.lr = 1e-3f;
  pc.trainer.lr = {pt::LrSchedule::Kind::constant, 1e-3f, 0, 0, 0.f};
  pc.trainer.clip_norm = 0.f;
  pc.schedule = pt::sched::add_communication(pt::sched::generate("1f1b", s.stages, f.microbatches));
  if (s.replicas > 1) pc.schedule = pt::sched::add_grad_reduction(pc.schedule);
  const auto sizes = pt::split_sizes(make_model(f).num_layers(), s.stages);
  pc.layers_per_stage.assign(sizes.begin(), sizes.end());
  pc.parallel.shard_optimizer = s.shard == Shard::optimizer;
  pc.parallel.shard_full = s.shard == Shard::full;
  pc.parallel.reshard_after_forward = s.reshard_after_forward;
  pc.parallel.shard_reduce_every_microbatch = s.reduce_every_microbatch;
  return pc;
}

std::unique_ptr<Setup> make_setup(const Flags& f, std::string name, int replicas, int stages,
                                  Shard shard, bool reshard_after_forward = true,
                                  bool reduce_every_microbatch = false) {
  auto s = std::make_unique<Setup>();
  s->name = std::move(name);
  s->replicas = replicas;
  s->stages = stages;
  s->shard = shard;
  s->reshard_after_forward = reshard_after_forward;
  s->reduce_every_microbatch = reduce_every_microbatch;
  std::vector<pt::Backend*> list;
  for (int d = 0; d < s->devices(); ++d) {
    s->owned.push_back(pt::make_cpu_backend(d, 1));
    list.push_back(s->owned.back().get());
  }
  s->trainer = pt::make_local_data_parallel([&] { return make_model(f); }, list,
                                            pipeline_config(f, *s), replicas);
  return s;
}

int cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

size_t peak_bytes_per_device(const Setup& s) {
  const std::vector<size_t> peaks = s.trainer->replica(0).last_peak_bytes();
  return peaks.empty() ? 0 : *std::max_element(peaks.begin(), peaks.end());
}

// The same over every replica's devices: ZeRO-1's ranges of whole tensors are balanced by bytes
// only as well as the tensors allow, so one replica may hold more than replica 0.
size_t peak_bytes_any_device(const Setup& s) {
  size_t peak = 0;
  for (int r = 0; r < s.trainer->local_replicas(); ++r)
    for (size_t p : s.trainer->replica(r).last_peak_bytes()) peak = std::max(peak, p);
  return peak;
}

size_t held_total(const pt::HeldBytes& h) { return h.parameters + h.gradients + h.optimizer; }

// The most full sharding may hold beyond DP's / R (see the header): per unit of every stage and
// per kind (parameters, gradients, each optimizer slot), R - 1 floats and an entry's alignment.
size_t shard_padding_bytes(const Flags& f, const Setup& s) {
  const pt::Model model = make_model(f);
  const pt::PipelineConfig pc = pipeline_config(f, s);
  size_t units = 0;
  int first = 0;
  for (int layers : pc.layers_per_stage) {
    units +=
        pt::full_shard_units(model, first, first + layers, pc.parallel.shard_unit_layers).size();
    first += layers;
  }
  const size_t kinds = 2 + static_cast<size_t>(pc.trainer.optimizer.state_slots());
  const size_t per_unit_and_kind =
      static_cast<size_t>(s.replicas - 1) * sizeof(float) + pt::kArenaAlignment;
  return units * kinds * per_unit_and_kind;
}

void report_step(const Flags& f, const Setup& s) {
  const Spread step = pt::bench::spread_of(s.step_s);
  const pt::HeldBytes held = s.trainer->replica(0).held_bytes();
  pt::bench::Fields out{{"bench", std::string("full_shard_step")},
                        {"setup", s.name},
                        {"devices", int64_t{s.devices()}},
                        {"replicas", int64_t{s.replicas}},
                        {"stages", int64_t{s.stages}},
                        {"shard", std::string(shard_name(s.shard))},
                        {"reshard_after_forward", int64_t{s.reshard_after_forward}},
                        {"threads_per_device", int64_t{1}},
                        {"cores", int64_t{cores()}},
                        {"oversubscribed", int64_t{s.devices() > cores()}}};
  pt::bench::add_spread(out, "step_ms", step, 1e3);
  pt::bench::add_spread(out, "samples_per_s",
                        pt::bench::rate_of(step, static_cast<double>(f.batch)));
  out.emplace_back("peak_bytes_per_device", static_cast<int64_t>(peak_bytes_per_device(s)));
  out.emplace_back("peak_bytes_any_device", static_cast<int64_t>(peak_bytes_any_device(s)));
  out.emplace_back("held_parameter_bytes", static_cast<int64_t>(held.parameters));
  out.emplace_back("held_gradient_bytes", static_cast<int64_t>(held.gradients));
  out.emplace_back("held_optimizer_bytes", static_cast<int64_t>(held.optimizer));
  out.emplace_back("gathered_peak_bytes", static_cast<int64_t>(held.gathered_peak));
  out.emplace_back("reps", int64_t{step.reps});
  pt::bench::emit(out);
}

// Each round's baseline step time over the setup's (the speedup in samples/s), median and
// spread, and the memory ratios.
void report_ratio(const Setup& s, const Setup& baseline) {
  std::vector<double> r;
  for (size_t i = 0; i < s.step_s.size(); ++i) r.push_back(baseline.step_s[i] / s.step_s[i]);
  const Spread ratio = pt::bench::spread_of(r);
  const auto held = [](const Setup& x) {
    return static_cast<double>(held_total(x.trainer->replica(0).held_bytes()));
  };
  pt::bench::Fields out{
      {"bench", std::string("full_shard_ratio")}, {"setup", s.name}, {"baseline", baseline.name}};
  pt::bench::add_spread(out, "speedup", ratio);
  out.emplace_back("speedup_of_medians", pt::bench::spread_of(baseline.step_s).median /
                                             pt::bench::spread_of(s.step_s).median);
  out.emplace_back("peak_ratio", static_cast<double>(peak_bytes_per_device(s)) /
                                     static_cast<double>(peak_bytes_per_device(baseline)));
  out.emplace_back("held_ratio", held(s) / held(baseline));
  out.emplace_back("reps", int64_t{ratio.reps});
  pt::bench::emit(out);
}

// The checks of the header, after every setup's first step: one line per setup; false when one
// fails (and why on stderr). Besides DP for the R = 2 setups, the R = 1 pipeline is compared with
// the single device: only the same R sums the loss in the same order (each replica its rows,
// then the group), and a stage boundary changes no sum.
bool check(const Flags& f, const std::vector<std::unique_ptr<Setup>>& setups, const Setup& single,
           const Setup& dp) {
  std::string failures;
  const size_t dp_held = held_total(dp.trainer->replica(0).held_bytes());
  for (const auto& s : setups) {
    pt::bench::Fields out{{"bench", std::string("full_shard_check")},
                          {"setup", s->name},
                          {"first_loss", s->first_loss}};
    const Setup& reference = s->replicas == dp.replicas ? dp : single;
    if (s.get() != &reference && s->replicas == reference.replicas) {
      const bool same = s->first_loss == reference.first_loss;
      out.emplace_back("reference", reference.name);
      out.emplace_back("same_first_loss", int64_t{same});
      if (!same)
        failures += fmt::format("the first loss of '{}' is {:.17g} but '{}''s is {:.17g}; ",
                                s->name, s->first_loss, reference.name, reference.first_loss);
    }
    if (s->shard == Shard::full) {
      const size_t held = held_total(s->trainer->replica(0).held_bytes());
      const size_t bound = dp_held / static_cast<size_t>(s->replicas) + shard_padding_bytes(f, *s);
      out.emplace_back("held_bytes", static_cast<int64_t>(held));
      out.emplace_back("held_bytes_dp", static_cast<int64_t>(dp_held));
      out.emplace_back("held_bound_bytes", static_cast<int64_t>(bound));
      out.emplace_back("held_within_bound", int64_t{held <= bound});
      if (held > bound)
        failures += fmt::format(
            "'{}' holds {} bytes between steps, more than DP's {} / {} + padding = {}; ", s->name,
            held, dp_held, s->replicas, bound);
    }
    pt::bench::emit(out);
  }
  if (!failures.empty()) fmt::print(stderr, "bench/full_shard: check failed: {}\n", failures);
  return failures.empty();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "bench/full_shard: step time and per-device peak memory of --shard full (ZeRO-3) vs "
      "--dp 2, --shard-optimizer and a 2-stage pipeline on CPU devices (JSON lines)"};
  Flags f;
  app.add_option("--hidden-layers", f.hidden_layers, "deep_mlp's hidden layers")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
  app.add_option("--width", f.width, "deep_mlp's hidden width")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
  app.add_option("--batch", f.batch, "global batch (samples per step, every setup)")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
  app.add_option("--microbatches", f.microbatches, "M per replica (every setup)")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
  app.add_option("--steps", f.steps, "timed rounds (one step of each setup per round)")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
  app.add_option("--warmup", f.warmup, "untimed steps of each setup first (at least 1)")
      ->check(pt::bench::kPositive)
      ->capture_default_str();
  app.add_flag("--quick", f.quick,
               "smoke run: deep_mlp(2, 64), batch 16, 2 rounds, 1 warm-up (unless given)");
  CLI11_PARSE(app, argc, argv);
  if (f.quick) {
    if (!app.count("--hidden-layers")) f.hidden_layers = 2;
    if (!app.count("--width")) f.width = 64;
    if (!app.count("--batch")) f.batch = 16;
    if (!app.count("--steps")) f.steps = 2;
    if (!app.count("--warmup")) f.warmup = 1;
  }
  // Each of R = 2 replicas splits its half of the batch into M micro-batches.
  if (f.batch % (2 * f.microbatches) != 0) {
    fmt::print(stderr, "--batch {} must be a multiple of 2 x --microbatches {}\n", f.batch,
               f.microbatches);
    return 2;
  }

  const pt::Model whole = make_model(f);
  pt::bench::emit({{"bench", std::string("full_shard_config")},
                   {"model", fmt::format("deep_mlp({}, {}): 784-{}x{}-10", f.hidden_layers, f.width,
                                         f.width, f.hidden_layers)},
                   {"params", whole.param_count()},
                   {"batch", f.batch},
                   {"microbatches", int64_t{f.microbatches}},
                   {"optimizer", std::string("adamw, no clipping")},
                   {"schedule", std::string("1f1b")},
                   {"threads_per_device", int64_t{1}},
                   {"cores", int64_t{cores()}}});

  std::vector<std::unique_ptr<Setup>> setups;
  setups.push_back(make_setup(f, "single device", 1, 1, Shard::none));
  setups.push_back(make_setup(f, "DP R=2", 2, 1, Shard::none));
  setups.push_back(make_setup(f, "ZeRO-1 R=2", 2, 1, Shard::optimizer));
  setups.push_back(make_setup(f, "full shard R=2", 2, 1, Shard::full));
  setups.push_back(make_setup(f, "full shard R=2, kept after forward", 2, 1, Shard::full, false));
  setups.push_back(
      make_setup(f, "full shard R=2, reduce every micro-batch", 2, 1, Shard::full, true, true));
  setups.push_back(make_setup(f, "pipeline S=2", 1, 2, Shard::none));
  setups.push_back(make_setup(f, "pipeline S=2 x full shard R=2", 2, 2, Shard::full));
  const Setup& dp = *setups[1];

  const pt::bench::Batch batch(f.batch);
  for (auto& s : setups) s->first_loss = s->trainer->train_step(batch.hx, batch.hy).loss;
  if (!check(f, setups, *setups[0], dp)) return 1;

  for (int k = 1; k < f.warmup; ++k)
    for (auto& s : setups) s->trainer->train_step(batch.hx, batch.hy);
  for (int r = 0; r < f.steps; ++r)
    for (auto& s : setups) {
      const auto t0 = Clock::now();
      s->trainer->train_step(batch.hx, batch.hy);
      s->step_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  for (const auto& s : setups) report_step(f, *s);
  for (const auto& s : setups)
    if (s.get() != &dp) report_ratio(*s, dp);
  return 0;
}
