#include "examples/fashion_mnist/flags.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/option_range.h"
#include "engine/io/output_path.h"
#include "engine/update/async_update_limits.h"
#include "examples/common/command_line.h"
#include "examples/common/integer_text.h"

namespace pt::examples {

void add_fashion_flags(CLI::App& app, FashionFlags& f) {
  app.add_option("--model", f.model, "mlp (784-1024x4-10) or cnn")->capture_default_str();
  app.add_option("--epochs", f.epochs, "passes over the training set")
      ->capture_default_str()
      ->check(integer_text<int64_t>("between 0 and 1000000 (0: only with --steps)"));
  app.add_option("--steps", f.steps,
                 "stop after this many optimizer steps (overrides --epochs; 0: --epochs decides)")
      ->capture_default_str()
      ->check(integer_text<int64_t>(">= 0 (0: --epochs decides)"));
  app.add_option("--batch", f.batch, "global batch size B")
      ->capture_default_str()
      ->check(integer_text<int64_t>(">= 1"));
  app.add_option("--optim", f.optim, "sgd or adamw")->capture_default_str();
  app.add_option("--lr", f.lr, "base learning rate")->capture_default_str();
  app.add_option("--momentum", f.momentum, "SGD momentum")->capture_default_str();
  app.add_flag("--nesterov", f.nesterov,
               "momentum in its look-ahead form (SGD: Nesterov's; AdamW: Dozat's NAdam step)");
  app.add_option("--weight-decay", f.weight_decay, "weight decay (SGD: L2; AdamW: decoupled)")
      ->capture_default_str();
  app.add_option("--clip", f.clip, "clip the global gradient norm to this value (0: off)")
      ->capture_default_str();
  app.add_option("--lr-schedule", f.lr_schedule, "constant or cosine")->capture_default_str();
  app.add_option("--warmup", f.warmup, "linear warm-up steps")
      ->capture_default_str()
      ->check(integer_text<int64_t>(">= 0 (0: none)"));
  app.add_option("--seed", f.seed, "seed for initialisation, shuffling and dropout")
      ->capture_default_str()
      ->check(kUint64Text);
  app.add_flag("--no-shuffle", f.no_shuffle, "keep the data set's order");
  add_parallel_flags(app, f.par);
  app.add_flag(
      "--parity-check", f.parity_check,
      "every step, also train the single-device reference from the same state and compare");
  app.add_option("--data", f.data, "folder with the Fashion-MNIST IDX files")
      ->capture_default_str();
  app.add_option("--metrics", f.metrics,
                 "write metrics as JSON lines to this file; missing folders above it are created "
                 "(default: none)");
  add_checkpoint_flags(app, f.checkpoints);
  app.add_option("--log-every", f.log_every, "progress line interval when not on a terminal")
      ->capture_default_str()
      ->check(integer_text<int64_t>(">= 1"));
  app.add_flag("--summary", f.summary, "print the model summary table");
  for (const char* name : {"--model", "--optim", "--lr-schedule", "--data", "--metrics"})
    app.get_option(name)->check(kNotEmpty);
  set_group(app, "Model", {"--model", "--summary"});
  set_group(app, "Data", {"--data", "--no-shuffle"});
  set_group(app, "Training",
            {"--epochs", "--steps", "--batch", "--optim", "--lr", "--momentum", "--nesterov",
             "--weight-decay", "--clip", "--lr-schedule", "--warmup", "--seed"});
  set_group(app, "Diagnostics", {"--parity-check", "--metrics", "--log-every"});
}

FashionOptions check_fashion_flags(const FashionFlags& f) {
  FashionOptions o;
  OptimizerConfig& opt = o.optimizer;
  opt.kind = f.optim;
  opt.lr = f.lr;
  opt.momentum = f.optim == "sgd" ? f.momentum : 0.f;
  opt.nesterov = f.nesterov;
  opt.weight_decay = f.weight_decay;
  opt.validate();  // --lr, --momentum, --weight-decay
  if (f.model != "mlp" && f.model != "cnn")
    throw UsageError(fmt::format("unknown --model '{}': use mlp or cnn", f.model));
  // 1e6 epochs of 60000 samples is 6e10 steps at --batch 1: the step count stays far from int64.
  check_integer("--epochs", f.epochs, 0, 1'000'000, "0: only with --steps");
  check_integer("--steps", f.steps, 0, INT64_MAX, "0: --epochs decides");
  if (f.epochs < 1 && f.steps < 1) throw UsageError("give --epochs >= 1 or --steps >= 1");
  check_integer("--warmup", f.warmup, 0, INT64_MAX, "0: none");
  check_integer("--log-every", f.log_every, 1);
  // Like --lr: a norm bound above 1e6 is no bound, inf is a typo for 0 (off).
  check_real("--clip", f.clip, {.lo = 0, .hi = 1e6}, "0: no clipping");
  o.parallel = training_options(f.par);
  // The pipeline runtime even for one stage: that is what --parity-check checks.
  o.parallel.force_pipeline = f.parity_check;
  o.parallel.check(f.batch);
  if (f.parity_check && o.parallel.ps > 0)
    throw UsageError("--parity-check does not support --ps yet: drop one of them");
  if (o.parallel.async_update) refuse_unsupported_with_async(f.clip, f.parity_check);
  o.checkpoints = checkpoint_options(f.checkpoints);
  o.checkpoints.settings = {{"model", f.model}, {"optim", f.optim}};
  // Before the data is read: a run must not train and then fail to write its results.
  o.checkpoints.check();
  if (!f.metrics.empty()) check_output_path(f.metrics, "--metrics");
  o.lr_schedule = LrSchedule::parse_kind(f.lr_schedule);
  return o;
}

}  // namespace pt::examples
