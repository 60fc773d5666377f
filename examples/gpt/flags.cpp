#include "examples/gpt/flags.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/option_range.h"
#include "engine/data/token_file.h"
#include "engine/io/output_path.h"
#include "engine/update/async_update_limits.h"
#include "examples/common/command_line.h"
#include "examples/common/integer_text.h"

namespace pt::examples {

namespace {

// The settings a checkpoint must have been saved with to be resumed (named like their flags):
// the model, and what the batches of each step are made of. The data source is added once the
// text is read. The optimizer is recorded when it is not AdamW (so that checkpoints written before
// --optim existed, all AdamW, still resume).
std::map<std::string, std::string> settings_to_match(const GptFlags& f) {
  std::map<std::string, std::string> s{{"context", std::to_string(f.context)},
                                       {"d-model", std::to_string(f.d_model)},
                                       {"layers", std::to_string(f.layers)},
                                       {"heads", std::to_string(f.heads)},
                                       {"untied", f.untied ? "true" : "false"},
                                       {"batch", std::to_string(f.batch)},
                                       {"val-fraction", fmt::format("{}", f.val_fraction)}};
  if (f.optim != "adamw") s["optim"] = f.optim;
  return s;
}

}  // namespace

void add_gpt_flags(CLI::App& app, GptFlags& f) {
  app.add_option("--context", f.context, "sequence length T (bytes)")
      ->capture_default_str()
      ->check(integer_text<int64_t>("between 1 and 1048576"));
  app.add_option("--d-model", f.d_model, "model width")
      ->capture_default_str()
      ->check(integer_text<int64_t>("between 1 and 1048576"));
  app.add_option("--layers", f.layers, "transformer blocks")
      ->capture_default_str()
      ->check(integer_text<int>("between 1 and 1048576"));
  app.add_option("--heads", f.heads, "attention heads (must divide --d-model)")
      ->capture_default_str()
      ->check(integer_text<int>("between 1 and 1048576"));
  app.add_option("--steps", f.steps, "optimizer steps")
      ->capture_default_str()
      ->check(integer_text<int64_t>(">= 1"));
  app.add_option("--batch", f.batch, "global batch B (windows of --context bytes)")
      ->capture_default_str()
      ->check(integer_text<int64_t>(">= 1"));
  app.add_option("--optim", f.optim, "adamw or sgd")->capture_default_str();
  app.add_option("--lr", f.lr, "base learning rate (the default suits AdamW; SGD wants ~0.1)")
      ->capture_default_str();
  app.add_option("--momentum", f.momentum, "SGD momentum")->capture_default_str();
  app.add_flag("--nesterov", f.nesterov,
               "momentum in its look-ahead form (SGD: Nesterov's; AdamW: Dozat's NAdam step)");
  app.add_option("--weight-decay", f.weight_decay,
                 "AdamW: decoupled weight decay; SGD: L2 added to the gradient")
      ->capture_default_str();
  app.add_option("--clip", f.clip, "clip the global gradient norm to this value (0: off)")
      ->capture_default_str();
  app.add_option("--lr-schedule", f.lr_schedule, "constant or cosine")->capture_default_str();
  app.add_option("--warmup", f.warmup, "linear warm-up steps")
      ->capture_default_str()
      ->check(integer_text<int64_t>(">= 0 (0: none)"));
  app.add_option("--min-lr", f.min_lr, "cosine: the learning rate at the last step")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "seed for initialisation, batches and sampling")
      ->capture_default_str()
      ->check(kUint64Text);
  app.add_option("--data", f.data,
                 "a text or token file to train on (default: the King James Bible from `bible`)")
      ->check(kNotEmpty);
  app.add_option("--data-format", f.data_format,
                 "text (bytes), llmc (llm.c's token file), uint16 (nanoGPT's raw tokens) or auto: "
                 "llmc when the file starts with llm.c's magic, else uint16 for a .bin name, else "
                 "text")
      ->capture_default_str();
  app.add_option("--vocab", f.vocab,
                 "the vocabulary of a token file, up to 65536 (default: 50257, GPT-2's, for llm.c "
                 "files; required for uint16 ones); the model pads it to a multiple of 128")
      ->check(integer_text<int64_t>("between 1 and 65536"));
  app.add_option("--val-fraction", f.val_fraction, "the tail of the text held out for validation")
      ->capture_default_str();
  app.add_option("--eval-every", f.eval_every, "validation loss every N steps (0: only at the end)")
      ->capture_default_str()
      ->check(integer_text<int64_t>(">= 0 (0: only at the end)"));
  app.add_option("--eval-windows", f.eval_windows,
                 "validation windows, spread over the held-out text (0: all)")
      ->capture_default_str()
      ->check(integer_text<int64_t>(">= 0 (0: all)"));
  app.add_option("--prompt", f.prompt, "text the sample starts from")->capture_default_str();
  app.add_option("--temperature", f.temperature, "sampling temperature (0: greedy)")
      ->capture_default_str();
  app.add_option("--top-k", f.top_k, "sample from the k most likely bytes (0: all)")
      ->capture_default_str()
      ->check(integer_text<int64_t>(">= 0 (0: all)"));
  app.add_option("--sample-bytes", f.sample_bytes, "bytes to sample after training (0: none)")
      ->capture_default_str()
      ->check(integer_text<int64_t>(">= 0 (0: none)"));
  add_parallel_flags(app, f.par);
  app.add_option("--metrics", f.metrics,
                 "write metrics as JSON lines to this file; missing folders above it are created "
                 "(default: none)")
      ->check(kNotEmpty);
  app.add_option("--log-every", f.log_every, "progress line interval when not on a terminal")
      ->capture_default_str()
      ->check(integer_text<int64_t>(">= 1"));
  app.add_flag("--summary", f.summary, "print the model summary table");
  app.add_flag("--untied", f.untied,
               "give lm_head its own weight instead of sharing tok_emb's (GPT-2 ties them)");
  app.add_flag(
      "--parity-check", f.parity_check,
      "every step, also train the single-device reference from the same state and compare");
  add_checkpoint_flags(app, f.checkpoints);
  for (const char* name : {"--optim", "--lr-schedule"}) app.get_option(name)->check(kNotEmpty);
  set_group(app, "Model",
            {"--context", "--d-model", "--layers", "--heads", "--untied", "--summary"});
  set_group(app, "Training",
            {"--steps", "--batch", "--optim", "--lr", "--momentum", "--nesterov", "--weight-decay",
             "--clip", "--lr-schedule", "--warmup", "--min-lr", "--seed"});
  set_group(
      app, "Data",
      {"--data", "--data-format", "--vocab", "--val-fraction", "--eval-every", "--eval-windows"});
  set_group(app, "Sampling", {"--prompt", "--temperature", "--top-k", "--sample-bytes"});
  set_group(app, "Diagnostics", {"--parity-check", "--metrics", "--log-every"});
}

GptOptions check_gpt_flags(const GptFlags& f) {
  GptOptions o;
  OptimizerConfig& opt = o.optimizer;
  opt.kind = f.optim;
  opt.lr = f.lr;
  opt.momentum = f.optim == "sgd" ? f.momentum : 0.f;
  opt.nesterov = f.nesterov;
  opt.weight_decay = f.weight_decay;
  opt.validate();  // --optim, --lr, --momentum, --nesterov, --weight-decay
  // The model: each size at least 1 (gpt() checks that --heads divides --d-model). Above 2^20
  // a context or width is beyond any memory this runs in; the bound keeps their products in int64.
  check_integer("--context", f.context, 1, 1 << 20);
  check_integer("--d-model", f.d_model, 1, 1 << 20);
  check_integer("--layers", f.layers, 1, 1 << 20);
  check_integer("--heads", f.heads, 1, 1 << 20);
  check_integer("--steps", f.steps, 1);
  check_integer("--warmup", f.warmup, 0, INT64_MAX, "0: none");
  // The cosine schedule ends at --min-lr: from 0 up to --lr.
  check_real("--min-lr", f.min_lr, {.lo = 0}, "the learning rate at the last step");
  if (f.min_lr > f.lr)
    throw UsageError(fmt::format(
        "--min-lr {} must be at most --lr {} (the cosine schedule ends there)", f.min_lr, f.lr));
  if (f.eval_every < 0)
    throw UsageError(
        fmt::format("--eval-every {} must be >= 0 (0: only at the end)", f.eval_every));
  check_integer("--eval-windows", f.eval_windows, 0, INT64_MAX, "0: all");
  // Token files: the rest (--vocab for text read by auto, a raw file without it) once the file
  // is opened (load_corpus).
  const DataFormat data_format = parse_data_format(f.data_format);
  if (f.vocab) check_integer("--vocab", *f.vocab, 1, kMaxTokenVocab, "token ids are uint16");
  if (f.data.empty() &&
      (f.vocab || data_format == DataFormat::llmc || data_format == DataFormat::uint16))
    throw UsageError(
        "--vocab and --data-format llmc or uint16 apply to a --data token file; the default "
        "data, the King James Bible, is byte-level text");
  if (data_format == DataFormat::text && f.vocab)
    throw UsageError("--vocab applies to token files; --data-format text is bytes (vocab 256)");
  if (f.sample_bytes < 0)
    throw UsageError(fmt::format("--sample-bytes {} must be >= 0", f.sample_bytes));
  if (!(f.val_fraction > 0 && f.val_fraction < 1))
    throw UsageError(
        fmt::format("--val-fraction {} must be between 0 and 1 (the share of the text "
                    "held out for validation, e.g. 0.1)",
                    f.val_fraction));
  check_integer("--log-every", f.log_every, 1);
  // Like --lr: a norm bound above 1e6 is no bound, inf is a typo for 0 (off).
  check_real("--clip", f.clip, {.lo = 0, .hi = 1e6}, "0: no clipping");
  SamplingOptions& sampling = o.sampling;
  sampling.max_new_tokens = f.sample_bytes;
  sampling.temperature = f.temperature;
  sampling.top_k = f.top_k;
  sampling.seed = f.seed;
  sampling.validate();
  if (f.sample_bytes > 0 && f.prompt.empty())
    throw UsageError(
        "--prompt is empty; give at least one character to start the sample from "
        "(or --sample-bytes 0 to skip sampling)");
  if (!f.metrics.empty()) check_output_path(f.metrics, "--metrics");
  TrainingOptions& par = o.parallel;
  par = training_options(f.par);
  // The pipeline runtime even for one stage: that is what --parity-check checks.
  par.force_pipeline = f.parity_check;
  par.check(f.batch);  // and --trace, --timeline
  if (par.ps > 0)
    throw UsageError(
        "pipetrain-gpt does not support --ps yet (its tied embedding and its own training loop); "
        "pipetrain-fashion does");
  if (par.async_update) refuse_unsupported_with_async(f.clip, f.parity_check);
  o.checkpoints = checkpoint_options(f.checkpoints);
  o.checkpoints.settings = settings_to_match(f);
  // Before the text is read: a run must not train and then fail to write its results.
  o.checkpoints.check();
  o.lr_schedule = LrSchedule::parse_kind(f.lr_schedule);
  return o;
}

}  // namespace pt::examples
