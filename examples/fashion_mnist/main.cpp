// pipetrain-fashion: trains an MLP or a CNN on Fashion-MNIST (the IDX files of Debian's
// dataset-fashion-mnist package) and reports the test accuracy.
//
// What it shows: the builder API; pipeline parallelism over S devices with any schedule
// (--stages, --schedule, --partition, --recompute), its plan (--plan-only), trace and timeline;
// data parallelism over R pipeline replicas (--dp), in one process or one process per device
// under mpirun/srun; single-device gradient accumulation over the same micro-batches (the
// reference, --parity-check); SGD/AdamW with LR schedules, metrics as JSON lines, checkpoints
// (--save/--save-every/--keep/--resume/--save-init, in every mode, under mpirun too; SIGTERM or
// SIGINT stops after the current step, saves and exits with 75). What it leaves out: GPUs.
//
//   pipetrain-fashion --model mlp --epochs 3
//   pipetrain-fashion --stages 2 --microbatches 8 --schedule 1f1b --trace run.json --timeline
//   run.svg pipetrain-fashion --model cnn --stages 3 --schedule zb-h1 --plan-only pipetrain-fashion
//   --devices cpu:0..3 --stages 2 --dp 2 mpirun -np 4 pipetrain-fashion --stages 2 --dp 2
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "engine/fit.h"
#include "engine/io/output_path.h"
#include "engine/option_range.h"
#include "engine/preemption.h"
#include "engine/setup/run_main.h"
#include "engine/setup/training_run.h"
#include "engine/trainer.h"
#include "examples/common/checkpoint_flags.h"
#include "examples/common/integer_text.h"
#include "examples/common/parallel_flags.h"
#include "examples/common/parity_check.h"
#ifdef PIPETRAIN_FAULT_INJECTION  // the test-only build, pipetrain-fashion-faults
#include "examples/fashion_mnist/fault_injection.h"
#endif
#include "layers/zoo.h"

namespace {

struct Flags {
  std::string model = "mlp";
  int64_t epochs = 3, steps = 0, batch = 256;
  std::string optim = "sgd";
  float lr = 0.05f, momentum = 0.9f, weight_decay = 0.f, clip = 0.f;
  bool nesterov = false;
  std::string lr_schedule = "constant";
  int64_t warmup = 0;
  uint64_t seed = 0;
  bool no_shuffle = false, parity_check = false;
  pt::examples::ParallelFlags par;
  std::string data = pt::kFashionMnistDir;
  std::string metrics;
  pt::examples::CheckpointFlags checkpoints;
  int64_t log_every = 50;
  bool summary = false;
};

int run(const Flags& f, pt::Communicator* world) {
  // ---- check everything the user gave before doing any work ----
  pt::OptimizerConfig opt;
  opt.kind = f.optim;
  opt.lr = f.lr;
  opt.momentum = f.optim == "sgd" ? f.momentum : 0.f;
  opt.nesterov = f.nesterov;
  opt.weight_decay = f.weight_decay;
  opt.validate();  // --lr, --momentum, --weight-decay
  if (f.model != "mlp" && f.model != "cnn")
    throw pt::UsageError(fmt::format("unknown --model '{}': use mlp or cnn", f.model));
  // 1e6 epochs of 60000 samples is 6e10 steps at --batch 1: the step count stays far from int64.
  pt::check_integer("--epochs", f.epochs, 0, 1'000'000, "0: only with --steps");
  pt::check_integer("--steps", f.steps, 0, INT64_MAX, "0: --epochs decides");
  if (f.epochs < 1 && f.steps < 1) throw pt::UsageError("give --epochs >= 1 or --steps >= 1");
  pt::check_integer("--warmup", f.warmup, 0, INT64_MAX, "0: none");
  pt::check_integer("--log-every", f.log_every, 1);
  // Like --lr: a norm bound above 1e6 is no bound, inf is a typo for 0 (off).
  pt::check_real("--clip", f.clip, {.lo = 0, .hi = 1e6}, "0: no clipping");
  pt::TrainingOptions par = pt::examples::training_options(f.par);
  par.force_pipeline =
      f.parity_check;  // the pipeline runtime even for one stage: that is what is checked
  par.check(f.batch);
  pt::CheckpointOptions checkpoints = pt::examples::checkpoint_options(f.checkpoints);
  checkpoints.settings = {{"model", f.model}, {"optim", f.optim}};
  // Before the data is read: a run must not train and then fail to write its results.
  checkpoints.check();
  pt::check_output_path(f.metrics, "--metrics");
  const auto schedule_kind = pt::LrSchedule::parse_kind(f.lr_schedule);
  const auto make_model = [&] { return f.model == "mlp" ? pt::fashion_mlp() : pt::fashion_cnn(); };
  pt::Model model = make_model();
  if (f.summary) fmt::print("{}", model.summary());

  pt::TrainerConfig cfg;
  cfg.microbatches = par.microbatches;
  cfg.seed = f.seed;
  cfg.optimizer = opt;
  cfg.clip_norm = f.clip;
  if (par.plan_only) {  // before loading any data
    pt::make_training(par, model, make_model, cfg, f.batch, world);
    return 0;
  }

  const pt::Dataset train = pt::load_fashion_mnist(f.data, true);
  const pt::Dataset test = pt::load_fashion_mnist(f.data, false);
  pt::FitOptions fit;
  fit.batch = f.batch;
  fit.epochs = f.epochs;
  fit.steps = f.steps;
  fit.shuffle = !f.no_shuffle;
  fit.log_every = f.log_every;
  fit.metrics = pt::speaks(world) ? f.metrics : "";
  fit.checkpoints = checkpoints;
  fit.world = world;
  cfg.lr = {schedule_kind, f.lr, f.warmup, pt::planned_steps(fit, train.size()), 0.f};

  pt::TrainingRun setup = pt::make_training(par, model, make_model, cfg, f.batch, world);
#ifdef PIPETRAIN_FAULT_INJECTION
  auto trainer = pt::FaultInjection::wrap(std::move(setup.engine),
                                          world ? world->world_rank(world->rank()) : 0);
#else
  std::unique_ptr<pt::TrainingEngine> trainer = std::move(setup.engine);
#endif
  fmt::print(
      "pipetrain-fashion: {} ({} parameters) on {}, batch {}{} in {} micro-batch{}, {}, {} steps\n",
      f.model, model.param_count(), setup.description, f.batch,
      par.dp > 1 ? " (split between the replicas)" : "", par.microbatches,
      par.microbatches == 1 ? "" : "es", opt.str(), cfg.lr.total_steps);
  fit.checkpoints.layout = setup.layout;
  std::unique_ptr<pt::examples::ParityCheckedEngine> parity;
  if (f.parity_check) {
    parity = std::make_unique<pt::examples::ParityCheckedEngine>(
        *trainer, par, make_model, cfg, setup.backends[0]->num_threads(), world);
    fmt::print("parity check: each step is also trained by the single-device reference\n");
  }
  const pt::FitResult r =
      pt::fit(parity ? static_cast<pt::TrainingEngine&>(*parity) : *trainer, train, &test, fit);
  if (r.preempted) {
    pt::examples::print_how_to_continue(r.preempted, trainer->step(), f.checkpoints);
    return pt::kExitPreempted;
  }
  if (r.steps == 0)  // only a resume gets here: --steps and --epochs are >= 1
    fmt::print(
        "nothing left to train: checkpoint {} is already at step {}{} of the {} steps this run "
        "plans; reporting the checkpoint's test accuracy\n",
        f.checkpoints.resume, trainer->step(),
        trainer->step() > cfg.lr.total_steps ? ", past the end" : "", cfg.lr.total_steps);
  else
    fmt::print("trained {} steps in {:.1f} s ({:.0f} samples/s); final train loss {:.4f}\n",
               r.steps, r.seconds, r.samples_per_second, r.last_loss);
  fmt::print("test accuracy: {:.2f}% (test loss {:.4f}, {} samples)\n", 100.0 * r.test.accuracy,
             r.test.loss, r.test.samples);
  pt::report_pipeline(par, setup, world);
  if (parity) return parity->verdict();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pipetrain-fashion: train an MLP or CNN on Fashion-MNIST"};
  Flags f;
  app.add_option("--model", f.model, "mlp (784-1024x4-10) or cnn")->capture_default_str();
  app.add_option("--epochs", f.epochs, "passes over the training set")
      ->capture_default_str()
      ->check(pt::examples::kInt64Text);
  app.add_option("--steps", f.steps, "stop after this many optimizer steps (overrides --epochs)")
      ->check(pt::examples::kInt64Text);
  app.add_option("--batch", f.batch, "global batch size B")
      ->capture_default_str()
      ->check(pt::examples::kInt64Text);
  app.add_option("--optim", f.optim, "sgd or adamw")->capture_default_str();
  app.add_option("--lr", f.lr, "base learning rate")->capture_default_str();
  app.add_option("--momentum", f.momentum, "SGD momentum")->capture_default_str();
  app.add_flag("--nesterov", f.nesterov, "Nesterov momentum (SGD)");
  app.add_option("--weight-decay", f.weight_decay, "weight decay (SGD: L2; AdamW: decoupled)");
  app.add_option("--clip", f.clip, "clip the global gradient norm to this value (0: off)");
  app.add_option("--lr-schedule", f.lr_schedule, "constant or cosine")->capture_default_str();
  app.add_option("--warmup", f.warmup, "linear warm-up steps")->check(pt::examples::kInt64Text);
  app.add_option("--seed", f.seed, "seed for initialisation, shuffling and dropout")
      ->capture_default_str()
      ->check(pt::examples::kUint64Text);
  app.add_flag("--no-shuffle", f.no_shuffle, "keep the data set's order");
  pt::examples::add_parallel_flags(app, f.par);
  app.add_flag(
      "--parity-check", f.parity_check,
      "every step, also train the single-device reference from the same state and compare");
  app.add_option("--data", f.data, "folder with the Fashion-MNIST IDX files")
      ->capture_default_str();
  app.add_option("--metrics", f.metrics, "write metrics as JSON lines to this file");
  pt::examples::add_checkpoint_flags(app, f.checkpoints);
  app.add_option("--log-every", f.log_every, "progress line interval when not on a terminal")
      ->check(pt::examples::kInt64Text);
  app.add_flag("--summary", f.summary, "print the model summary table");
  CLI11_PARSE(app, argc, argv);
  return pt::run_main(
      f.par.timeout, [&](pt::Communicator* world) { return run(f, world); }, f.par.flight_recorder);
}
