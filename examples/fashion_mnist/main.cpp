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
#include "engine/loop/fit.h"
#include "engine/process/preemption.h"
#include "engine/report/resident_memory.h"
#include "engine/setup/run_main.h"
#include "engine/setup/training_run.h"
#include "engine/train/trainer.h"
#include "examples/common/checkpoint_flags.h"
#include "examples/common/command_line.h"
#include "examples/common/parallel_flags.h"
#include "examples/common/parity_check.h"
#include "examples/fashion_mnist/flags.h"
#ifdef PIPETRAIN_FAULT_INJECTION  // the test-only build, pipetrain-fashion-faults
#include "examples/fashion_mnist/fault_injection.h"
#endif
#include "layers/zoo.h"

namespace {

int run(const pt::examples::FashionFlags& f, pt::Communicator* world) {
  // ---- check everything the user gave before doing any work (flags.cpp) ----
  const pt::examples::FashionOptions checked = pt::examples::check_fashion_flags(f);
  const pt::OptimizerConfig& opt = checked.optimizer;
  const pt::TrainingOptions& par = checked.parallel;
  const pt::CheckpointOptions& checkpoints = checked.checkpoints;
  const auto make_model = [&] { return f.model == "mlp" ? pt::fashion_mlp() : pt::fashion_cnn(); };
  // Built here once so that a model that cannot be built (its shapes) fails before any data is
  // read; make_training builds the one it trains.
  const pt::Model checked_model = make_model();
  if (f.summary) fmt::print("{}", checked_model.summary());

  pt::TrainerConfig cfg;
  cfg.microbatches = par.microbatches;
  cfg.seed = f.seed;
  cfg.optimizer = opt;
  cfg.clip_norm = f.clip;
  if (par.plan_only) {  // before loading any data
    pt::make_training(par, make_model, f.batch, cfg, world);
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
  cfg.lr = {checked.lr_schedule, f.lr, f.warmup, pt::planned_steps(fit, train.size()), 0.f};

  pt::TrainingRun setup = pt::make_training(par, make_model, f.batch, cfg, world);
  if (setup.serve) return setup.serve();  // --ps: this process is a parameter server
  // The training loop's collectives (stop-signal check every step, checkpoints) are the workers'
  // only; asynchronous workers never meet per step: the stop check is over the workers in
  // lockstep with this one, and the servers relay a stop to the others.
  if (setup.workers) fit.world = setup.lockstep;
  // Saves are collective over the workers either way (replica 0 writes the servers' state).
  if (setup.workers) fit.checkpoint_world = setup.workers;
#ifdef PIPETRAIN_FAULT_INJECTION
  auto trainer = pt::FaultInjection::wrap(std::move(setup.engine),
                                          world ? world->world_rank(world->rank()) : 0);
#else
  std::unique_ptr<pt::TrainingEngine> trainer = std::move(setup.engine);
#endif
  fmt::print(
      "pipetrain-fashion: {} ({} parameters) on {}, batch {}{} in {} micro-batch{}, {}, {} steps\n",
      f.model, setup.model->param_count(), setup.description, f.batch,
      setup.options.dp > 1 ? " (split between the replicas)" : "", setup.options.microbatches,
      setup.options.microbatches == 1 ? "" : "es", setup.optimizer.str(), cfg.lr.total_steps);
  fit.checkpoints.layout = setup.layout;
  std::unique_ptr<pt::examples::ParityCheckedEngine> parity;
  if (f.parity_check) {
    parity = std::make_unique<pt::examples::ParityCheckedEngine>(
        *trainer, setup.options, make_model, cfg, setup.backends[0]->num_threads(), world);
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
  // The kernel's high-water mark: model, optimizer, activations, data and libraries together.
  fmt::print("peak resident memory: {:.1f} MiB (this process)\n",
             static_cast<double>(pt::peak_resident_bytes()) / (1 << 20));
  pt::report_pipeline(par, setup, world);
  if (parity) return parity->verdict();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pipetrain-fashion: train an MLP or CNN on Fashion-MNIST"};
  pt::examples::FashionFlags f;
  pt::examples::add_fashion_flags(app, f);
  if (const int code = pt::examples::parse_command_line(app, argc, argv); code >= 0) return code;
  return pt::run_main(
      f.par.timeout, [&](pt::Communicator* world) { return run(f, world); }, f.par.flight_recorder);
}
