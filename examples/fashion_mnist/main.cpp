// pipetrain-fashion: trains an MLP or a CNN on Fashion-MNIST (the IDX files of Debian's
// dataset-fashion-mnist package) and reports the test accuracy.
//
// What it shows: the builder API; pipeline parallelism over S devices with any schedule
// (--stages, --schedule, --partition, --recompute), its plan (--plan-only), trace and timeline;
// single-device gradient accumulation over micro-batches (the reference, --parity-check);
// SGD/AdamW with LR schedules, metrics as JSON lines, checkpoints (--save/--resume/--save-init).
// What it leaves out: data parallelism and GPUs (later issues).
//
//   pipetrain-fashion --model mlp --epochs 3
//   pipetrain-fashion --stages 2 --microbatches 8 --schedule 1f1b --trace run.json --timeline run.svg
//   pipetrain-fashion --model cnn --stages 3 --schedule zb-h1 --plan-only
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "engine/devices.h"
#include "engine/fit.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "engine/pipeline/plan.h"
#include "engine/pipeline/step_trace.h"
#include "engine/trace/bubble.h"
#include "engine/trace/chrome_trace.h"
#include "engine/trace/timeline_svg.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"

namespace {

struct Flags {
  std::string model = "mlp";
  int64_t epochs = 3, steps = 0, batch = 256;
  int microbatches = 1;
  std::string optim = "sgd";
  float lr = 0.05f, momentum = 0.9f, weight_decay = 0.f, clip = 0.f;
  bool nesterov = false;
  std::string lr_schedule = "constant";
  int64_t warmup = 0;
  uint64_t seed = 0;
  bool no_shuffle = false;
  int threads = 0;
  std::string devices = "auto";
  int stages = 1;
  std::string schedule = "1f1b", partition = "time", recompute = "never", costs = "estimate";
  double mem_cap_mib = 0, timeout = 60;
  bool plan_only = false, parity_check = false;
  std::string trace, timeline;
  std::string data = pt::kFashionMnistDir;
  std::string metrics, save, save_init, resume;
  int64_t log_every = 50, save_every = 0;
  bool summary = false;
};

// Trains the single-device reference (gradient accumulation over the same micro-batches, same
// thread count) on the same batches and reports the largest difference per tensor.
int parity_check(const Flags& f, const std::function<pt::Model()>& make_model, const pt::TrainerConfig& cfg,
                 pt::FitOptions fit, const pt::Dataset& train, pt::TrainingEngine& pipelined, int threads) {
  fmt::print("parity check: training the single-device reference on the same batches...\n");
  fit.metrics.clear();
  fit.save.clear();
  fit.save_init.clear();
  fit.resume.clear();
  pt::Model reference_model = make_model();
  auto backend = pt::make_cpu_backend(f.stages, threads);  // same threads: same GEMM arithmetic
  backend->bind_current_thread();
  pt::Trainer reference(reference_model, *backend, cfg);
  if (pipelined.step() != pt::planned_steps(fit, train.size()))
    throw pt::UsageError("--parity-check does not combine with --resume: it replays the run from the start");
  pt::fit(reference, train, nullptr, fit);
  double worst = 0;
  size_t differing = 0, tensors = 0;
  for (const pt::StageState& s : pipelined.stage_states())
    for (size_t i = 0; i < s.params->entries().size(); ++i) {
      const std::string& name = s.params->entries()[i].name;
      const pt::Tensor a = s.params->param(i);
      const auto& ref_entries = reference.parameters().entries();
      size_t j = 0;
      while (j < ref_entries.size() && ref_entries[j].name != name) ++j;
      const pt::Tensor b = reference.parameters().param(j);
      double diff = 0;
      for (int64_t k = 0; k < a.numel(); ++k) diff = std::max(diff, static_cast<double>(std::abs(a.f32()[k] - b.f32()[k])));
      fmt::print("  {:<24} max |pipeline - reference| = {:.3g}\n", name, diff);
      worst = std::max(worst, diff);
      differing += diff > 0;
      ++tensors;
    }
  if (differing == 0) fmt::print("parity: all {} tensors are bit-identical to the single-device reference\n", tensors);
  else fmt::print("parity: {} of {} tensors differ; the largest difference is {:.3g}\n", differing, tensors, worst);
  return differing == 0 ? 0 : 3;
}

int run(const Flags& f) {
  // ---- check everything the user gave before doing any work ----
  pt::OptimizerConfig opt;
  opt.kind = f.optim;
  opt.lr = f.lr;
  opt.momentum = f.optim == "sgd" ? f.momentum : 0.f;
  opt.nesterov = f.nesterov;
  opt.weight_decay = f.weight_decay;
  opt.validate();
  if (f.model != "mlp" && f.model != "cnn")
    throw pt::UsageError(fmt::format("unknown --model '{}': use mlp or cnn", f.model));
  if (f.microbatches < 1) throw pt::UsageError("--microbatches must be >= 1");
  if (f.microbatches > f.batch)
    throw pt::UsageError(fmt::format("--microbatches {} is more than the --batch of {} samples: every "
                                     "micro-batch needs at least one sample", f.microbatches, f.batch));
  if (f.epochs < 1 && f.steps < 1) throw pt::UsageError("give --epochs >= 1 or --steps >= 1");
  const auto schedule_kind = pt::LrSchedule::parse_kind(f.lr_schedule);

  const auto make_model = [&] { return f.model == "mlp" ? pt::fashion_mlp() : pt::fashion_cnn(); };
  pt::Model model = make_model();
  if (f.summary) fmt::print("{}", model.summary());
  const pt::RecomputePolicy recompute = pt::RecomputePolicy::parse(f.recompute);
  const bool pipelined = f.stages > 1 || f.schedule.starts_with("file:") || !f.trace.empty() ||
                         !f.timeline.empty() || f.parity_check || f.plan_only;

  pt::PlanRequest request;
  request.devices = f.stages;
  request.microbatches = f.microbatches;
  request.batch = f.batch;
  request.schedule = f.schedule;
  request.partition = f.partition;
  request.mem_cap_bytes = static_cast<int64_t>(f.mem_cap_mib * 1024 * 1024);
  request.costs = f.costs;
  request.optimizer_slots = f.optim == "adamw" ? 2 : (f.momentum > 0 ? 1 : 0);

  pt::DeviceSet devices = pt::open_devices(f.devices, f.stages, f.threads);
  if (!devices.note.empty()) fmt::print("{}\n", devices.note);
  if (static_cast<int>(devices.backends.size()) != f.stages)
    throw pt::UsageError(fmt::format("--devices {} lists {} device{} but --stages is {}: give one device per stage",
                                     f.devices, devices.backends.size(), devices.backends.size() == 1 ? "" : "s",
                                     f.stages));
  std::vector<pt::Backend*> backends;
  for (auto& b : devices.backends) backends.push_back(b.get());
  std::optional<pt::PipelinePlan> plan;
  if (pipelined) {
    plan = pt::make_plan(model, request, backends[0]);
    fmt::print("{}", plan->report());
    if (f.plan_only) return 0;
  }

  const pt::Dataset train = pt::load_fashion_mnist(f.data, true);
  const pt::Dataset test = pt::load_fashion_mnist(f.data, false);

  pt::FitOptions fit;
  fit.batch = f.batch;
  fit.epochs = f.epochs;
  fit.steps = f.steps;
  fit.shuffle = !f.no_shuffle;
  fit.log_every = f.log_every;
  fit.save_every = f.save_every;
  fit.metrics = f.metrics;
  fit.save = f.save;
  fit.save_init = f.save_init;
  fit.resume = f.resume;
  fit.settings = {{"model", f.model}, {"optim", f.optim}};

  pt::TrainerConfig cfg;
  cfg.microbatches = f.microbatches;
  cfg.seed = f.seed;
  cfg.optimizer = opt;
  cfg.clip_norm = f.clip;
  cfg.lr = {schedule_kind, f.lr, f.warmup, pt::planned_steps(fit, train.size()), 0.f};
  std::unique_ptr<pt::TrainingEngine> trainer;
  pt::PipelineTrainer* pipeline = nullptr;
  if (pipelined) {
    pt::PipelineConfig pc;
    pc.trainer = cfg;
    pc.schedule = plan->schedule;
    pc.layers_per_stage = plan->partition.layout();
    pc.recompute = recompute;
    pc.timeout_s = f.timeout;
    pc.record_trace = true;  // a clock read per action: cheap, and the bubble is worth printing
    auto p = std::make_unique<pt::PipelineTrainer>(model, backends, pc);
    pipeline = p.get();
    trainer = std::move(p);
  } else {
    trainer = std::make_unique<pt::Trainer>(model, *backends[0], cfg);
  }

  fmt::print("pipetrain-fashion: {} ({} parameters) on {}{}, batch {} in {} micro-batch{}, {}, {} steps\n",
             f.model, model.param_count(), backends[0]->describe(),
             f.stages > 1 ? fmt::format(" and {} more device(s), schedule {}, recompute {}", f.stages - 1,
                                        f.schedule, recompute.str())
                          : "",
             f.batch, f.microbatches, f.microbatches == 1 ? "" : "es", opt.str(), cfg.lr.total_steps);
  const pt::FitResult r = pt::fit(*trainer, train, &test, fit);
  fmt::print("trained {} steps in {:.1f} s ({:.0f} samples/s); final train loss {:.4f}\n", r.steps,
             r.seconds, r.samples_per_second, r.last_loss);
  fmt::print("test accuracy: {:.2f}% (test loss {:.4f}, {} samples)\n", 100.0 * r.test.accuracy,
             r.test.loss, r.test.samples);

  if (pipeline && r.steps > 0) {
    const int step = static_cast<int>(pipeline->step() - 1);
    const pt::Trace trace = pt::step_trace(pipeline->last_trace(), backends, step);
    const pt::BubbleStats bubble = pt::measure_bubble(trace, step);
    fmt::print("last step: {:.2f} ms measured vs {:.2f} ms predicted; bubble per device measured / predicted:",
               bubble.step_span_us / 1e3, plan->predicted_step_s() * 1e3);
    for (size_t d = 0; d < bubble.bubble_fraction.size(); ++d)
      fmt::print(" {:.1f}% / {:.1f}%", 100 * bubble.bubble_fraction[d], 100 * plan->simulated.bubble_fraction[d]);
    fmt::print("\n");
    if (!f.trace.empty()) {
      pt::write_chrome_trace(f.trace, trace);
      fmt::print("wrote the trace of the last step to {} (open in https://ui.perfetto.dev)\n", f.trace);
    }
    if (!f.timeline.empty()) {
      pt::write_timeline_svg(f.timeline, trace, step);
      fmt::print("wrote the timeline of the last step to {}\n", f.timeline);
    }
  }
  if (f.parity_check) return parity_check(f, make_model, cfg, fit, train, *trainer, backends[0]->num_threads());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pipetrain-fashion: train an MLP or CNN on Fashion-MNIST"};
  Flags f;
  app.add_option("--model", f.model, "mlp (784-1024x4-10) or cnn")->capture_default_str();
  app.add_option("--epochs", f.epochs, "passes over the training set")->capture_default_str();
  app.add_option("--steps", f.steps, "stop after this many optimizer steps (overrides --epochs)");
  app.add_option("--batch", f.batch, "global batch size B")->capture_default_str();
  app.add_option("--microbatches", f.microbatches, "split each batch into M micro-batches")->capture_default_str();
  app.add_option("--optim", f.optim, "sgd or adamw")->capture_default_str();
  app.add_option("--lr", f.lr, "base learning rate")->capture_default_str();
  app.add_option("--momentum", f.momentum, "SGD momentum")->capture_default_str();
  app.add_flag("--nesterov", f.nesterov, "Nesterov momentum (SGD)");
  app.add_option("--weight-decay", f.weight_decay, "weight decay (SGD: L2; AdamW: decoupled)");
  app.add_option("--clip", f.clip, "clip the global gradient norm to this value (0: off)");
  app.add_option("--lr-schedule", f.lr_schedule, "constant or cosine")->capture_default_str();
  app.add_option("--warmup", f.warmup, "linear warm-up steps");
  app.add_option("--seed", f.seed, "seed for initialisation, shuffling and dropout")->capture_default_str();
  app.add_flag("--no-shuffle", f.no_shuffle, "keep the data set's order");
  app.add_option("--threads", f.threads, "threads per device (0: cores / devices)");
  app.add_option("--devices", f.devices, "one device per stage: cpu:0,cpu:1 | cpu:0..3 | auto")->capture_default_str();
  app.add_option("--stages", f.stages, "pipeline stages S (one device each)")->capture_default_str();
  app.add_option("--schedule", f.schedule, "gpipe | 1f1b | interleaved:V | zb-h1 | file:PATH")->capture_default_str();
  app.add_option("--partition", f.partition, "uniform | params | time | memory | layout:a,b,...")->capture_default_str();
  app.add_option("--costs", f.costs, "layer costs for the partitioner: estimate | profile")->capture_default_str();
  app.add_option("--mem-cap", f.mem_cap_mib, "memory cap per device in MiB (--partition memory)");
  app.add_option("--recompute", f.recompute, "never | always | except_last | every:K")->capture_default_str();
  app.add_option("--timeout", f.timeout, "seconds any wait for a peer may take")->capture_default_str();
  app.add_flag("--plan-only", f.plan_only, "print partition, schedule and predicted step time, then exit");
  app.add_option("--trace", f.trace, "write a Chrome/Perfetto trace of the last step");
  app.add_option("--timeline", f.timeline, "write an SVG timeline of the last step");
  app.add_flag("--parity-check", f.parity_check, "also train the single-device reference and compare");
  app.add_option("--data", f.data, "folder with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--metrics", f.metrics, "write metrics as JSON lines to this file");
  app.add_option("--save", f.save, "write a checkpoint (safetensors) here at the end");
  app.add_option("--save-every", f.save_every, "also write --save every N steps");
  app.add_option("--save-init", f.save_init, "write the initial weights (safetensors) here");
  app.add_option("--resume", f.resume, "continue training from this checkpoint");
  app.add_option("--log-every", f.log_every, "progress line interval when not on a terminal");
  app.add_flag("--summary", f.summary, "print the model summary table");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f);
  } catch (const pt::UsageError& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
