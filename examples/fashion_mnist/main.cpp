// pipetrain-fashion: trains an MLP or a CNN on Fashion-MNIST (the IDX files of Debian's
// dataset-fashion-mnist package) and reports the test accuracy.
//
// What it shows: the builder API, single-device gradient accumulation over micro-batches,
// SGD/AdamW with LR schedules, metrics as JSON lines, checkpoints (--save/--resume/--save-init).
// What it leaves out: several devices (pipeline stages arrive with the scheduler flags).
//
//   pipetrain-fashion --model mlp --epochs 3
//   pipetrain-fashion --model cnn --steps 200 --microbatches 4 --metrics run.jsonl
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "engine/devices.h"
#include "engine/fit.h"
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
  std::string devices = "cpu:0";
  std::string data = pt::kFashionMnistDir;
  std::string metrics, save, save_init, resume;
  int64_t log_every = 50, save_every = 0;
  bool summary = false;
};

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

  pt::DeviceSet devices = pt::open_devices(f.devices, 1, f.threads);
  if (devices.backends.size() != 1)
    throw pt::UsageError(fmt::format("--devices lists {} devices; this build trains on one device "
                                     "(pipeline stages come with --stages)", devices.backends.size()));
  if (!devices.note.empty()) fmt::print("{}\n", devices.note);
  pt::Backend& backend = *devices.backends[0];

  pt::Model model = f.model == "mlp" ? pt::fashion_mlp() : pt::fashion_cnn();
  if (f.summary) fmt::print("{}", model.summary());

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
  pt::Trainer trainer(model, backend, cfg);

  fmt::print("pipetrain-fashion: {} ({} parameters) on {}, batch {} in {} micro-batch{}, {}, {} steps\n",
             f.model, model.param_count(), backend.describe(), f.batch, f.microbatches,
             f.microbatches == 1 ? "" : "es", opt.str(), cfg.lr.total_steps);
  const pt::FitResult r = pt::fit(trainer, train, &test, fit);
  fmt::print("trained {} steps in {:.1f} s ({:.0f} samples/s); final train loss {:.4f}\n", r.steps,
             r.seconds, r.samples_per_second, r.last_loss);
  fmt::print("test accuracy: {:.2f}% (test loss {:.4f}, {} samples)\n", 100.0 * r.test.accuracy,
             r.test.loss, r.test.samples);
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
  app.add_option("--devices", f.devices, "cpu:0 | auto")->capture_default_str();
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
