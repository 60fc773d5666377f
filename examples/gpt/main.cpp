// pipetrain-gpt: trains a small GPT-2 style byte-level language model on the King James Bible
// (Debian's bible-kjv) or any text file, reports the validation loss in nats per byte, and
// samples text from a prompt. It also trains on token files (llm.c's or nanoGPT's uint16 tokens,
// --data-format, --vocab), in nats per token, without a sample: it has no tokenizer.
//
// What it shows: gpt() (layers/zoo.h) trained with any of the set-ups of the library's entry
// point (engine/setup/training_run.h; flags in examples/common/parallel_flags.h): one device, a
// pipeline over S devices with any schedule, R data-parallel replicas, or one process per device
// under mpirun; a training loop
// over random text windows that are a pure function of (seed, step); validation over fixed
// windows of a held-out tail; sampling (temperature, top-k) from the trained parameters copied
// onto one device; checkpoints (--save/--save-every/--keep/--resume/--save-init, in every mode,
// under mpirun too; the data position is the step; SIGTERM or SIGINT stops after the current
// step, saves and exits with 75); the single-device reference on the same batches
// (--parity-check). What it leaves out: GPUs, dropout.
//
//   pipetrain-gpt --steps 200
//   pipetrain-gpt --steps 400 --save runs --save-every 100 --keep 2
//   pipetrain-gpt --steps 800 --resume latest:runs --save runs --save-every 100 --keep 2
//   pipetrain-gpt --stages 2 --microbatches 4 --schedule 1f1b
//   pipetrain-gpt --data mytext.txt --context 64 --d-model 128 --layers 2
//   pipetrain-gpt --data fineweb_train_000001.bin --context 1024 --d-model 768 --heads 12
//   mpirun -np 2 pipetrain-gpt --stages 2
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/checkpoint/run_checkpoints.h"
#include "engine/core/error.h"
#include "engine/data/text_corpus.h"
#include "engine/data/token_file.h"
#include "engine/inference/generate.h"
#include "engine/loop/step_record.h"
#include "engine/process/preemption.h"
#include "engine/report/metrics.h"
#include "engine/report/progress.h"
#include "engine/report/resident_memory.h"
#include "engine/setup/run_main.h"
#include "engine/setup/training_run.h"
#include "engine/train/trainer.h"
#include "examples/common/checkpoint_flags.h"
#include "examples/common/command_line.h"
#include "examples/common/parallel_flags.h"
#include "examples/common/parity_check.h"
#include "examples/gpt/flags.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/zoo.h"

namespace {

// The batches are a pure function of (seed, step): the step is the whole data position.
pt::TrainingState state_of(const pt::TrainingEngine& engine) {
  pt::TrainingState s;
  s.step = engine.step();
  s.seed = engine.seed();
  return s;
}

// Mean loss per token (nats) over the evaluation windows of `corpus`: every evaluate() returns
// the mean over its batch, so the batches are weighted by their window counts.
double validation_loss(pt::TrainingEngine& engine, const pt::TokenCorpus& corpus,
                       const pt::examples::GptFlags& f) {
  pt::WindowIterator windows(corpus, 4 * f.batch, f.context, f.eval_windows);
  pt::TokenBatch b;
  double sum = 0;
  while (windows.next(b)) {
    const pt::EvalStats ev = engine.evaluate(b.inputs(), b.targets(), f.batch);
    sum += ev.loss * static_cast<double>(b.batch);
  }
  return sum / static_cast<double>(windows.windows());
}

int run(const pt::examples::GptFlags& f, pt::Communicator* world) {
  // ---- check everything the user gave before doing any work (flags.cpp) ----
  const pt::examples::GptOptions checked = pt::examples::check_gpt_flags(f);
  const pt::OptimizerConfig& opt = checked.optimizer;
  const pt::SamplingOptions& sampling = checked.sampling;
  const pt::TrainingOptions& par = checked.parallel;
  pt::CheckpointOptions checkpoint_options = checked.checkpoints;
  // The data's format and vocabulary before the model: auto reads the file's first 4 bytes.
  pt::DataFormat format = pt::DataFormat::text;  // the Bible
  if (!f.data.empty()) {
    format = pt::parse_data_format(f.data_format);
    if (format == pt::DataFormat::automatic) format = pt::detect_data_format(f.data);
  }
  const bool token_file = format != pt::DataFormat::text;
  const char* unit = token_file ? "token" : "byte";
  const int64_t vocab = f.data.empty() ? pt::kByteVocab : pt::data_vocab(f.data, format, f.vocab);
  const auto make_model = [&] {
    return pt::gpt(pt::padded_vocab(vocab), f.context, f.d_model, f.layers, f.heads, !f.untied);
  };
  // Built here once so that a model that cannot be built (its shapes) fails before any data is
  // read; make_training builds the one it trains.
  const pt::Model checked_model = make_model();
  if (f.summary) fmt::print("{}", checked_model.summary());

  pt::TrainerConfig cfg;
  cfg.microbatches = par.microbatches;
  cfg.seed = f.seed;
  cfg.optimizer = opt;
  cfg.clip_norm = f.clip;
  cfg.lr = {checked.lr_schedule, f.lr, f.warmup, f.steps, f.min_lr};
  if (par.plan_only) {  // before reading any text
    pt::make_training(par, make_model, f.batch, cfg, world);
    return 0;
  }

  // ---- data ----
  const pt::TokenCorpus corpus =
      f.data.empty() ? pt::bible_corpus() : pt::load_corpus(f.data, format, f.vocab);
  const pt::TokenCorpus::Split parts = corpus.split(f.val_fraction);
  // Fail here, not after training, when the validation part is too short for one window.
  const pt::WindowIterator probe(parts.validation, 1, f.context, f.eval_windows);
  fmt::print("data: {} ({} {}s): {} for training, {} for validation ({} windows of {} {}s)\n",
             corpus.source(), corpus.size(), unit, parts.train.size(), parts.validation.size(),
             probe.windows(), f.context, unit);
  if (token_file)
    fmt::print("vocabulary: {} ids, the model's {} (padded to a multiple of 128)\n", vocab,
               pt::padded_vocab(vocab));

  checkpoint_options.settings["data"] = corpus.source();
  // The model's shape and the meaning of the ids. Only for token files: text checkpoints written
  // before --vocab existed still resume.
  if (token_file) checkpoint_options.settings["vocab"] = std::to_string(vocab);

  pt::TrainingRun setup = pt::make_training(par, make_model, f.batch, cfg, world);
  std::unique_ptr<pt::examples::ParityCheckedEngine> parity;
  if (f.parity_check)
    parity = std::make_unique<pt::examples::ParityCheckedEngine>(
        *setup.engine, setup.options, make_model, cfg, setup.backends[0]->num_threads(), world);
  pt::TrainingEngine& engine = parity ? *parity : *setup.engine;
  checkpoint_options.layout = setup.layout;
  pt::RunCheckpoints checkpoints(checkpoint_options, world);
  const int64_t tokens_per_step = f.batch * f.context;
  fmt::print(
      "pipetrain-gpt: gpt(context {}, d_model {}, {} layers, {} heads; {} parameters) on {}, "
      "batch {} x {} {}s in {} micro-batch{}, {}, lr {} ({}{}), {} steps\n",
      f.context, f.d_model, f.layers, f.heads, setup.model->unique_param_count(), setup.description,
      f.batch, f.context, unit, setup.options.microbatches,
      setup.options.microbatches == 1 ? "" : "es", setup.optimizer.str(), f.lr, f.lr_schedule,
      f.warmup > 0 ? fmt::format(", {} warm-up steps", f.warmup) : "", f.steps);

  // ---- resume ----
  int64_t resumed_at = -1;
  if (const std::optional<pt::TrainingState> s = checkpoints.resume(engine)) {
    resumed_at = s->step;
    fmt::print("resumed from {} at step {}\n", checkpoints.resumed_from().string(), s->step);
  }
  checkpoints.save_init(engine, state_of(engine));

  // ---- training ----
  pt::MetricsWriter metrics = f.metrics.empty() || !pt::speaks(world)
                                  ? pt::MetricsWriter()
                                  : pt::MetricsWriter(f.metrics, resumed_at);
  pt::PreemptionWatch preemption;
  const char* preempted = nullptr;
  pt::Progress progress("train", f.steps, f.log_every);
  double train_seconds = 0, eval_seconds = 0, recent_loss = 0, val_loss = NAN;
  int64_t recent = 0, steps_trained = 0;
  auto evaluate = [&] {
    progress.finish();
    const auto t0 = std::chrono::steady_clock::now();
    val_loss = validation_loss(engine, parts.validation, f);
    eval_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("step {}: validation loss {:.4f} nats/{} ({:.3f} bits/{})\n", engine.step(),
               val_loss, unit, val_loss / std::log(2.0), unit);
    metrics.write(
        {{"event", std::string("eval")}, {"step", engine.step()}, {"val_loss", val_loss}});
  };
  while (engine.step() < f.steps) {
    // Up to window() steps (--update async runs them as one schedule), never past an evaluation,
    // a checkpoint or the last step: those see a drained pipeline.
    const int64_t first = engine.step();
    std::vector<pt::TokenBatch> window;
    for (;;) {
      const int64_t step = first + static_cast<int64_t>(window.size());
      window.push_back(parts.train.sample_batch(f.batch, f.context, f.seed, step));
      const int64_t after = step + 1;
      if (static_cast<int64_t>(window.size()) >= engine.window() || after >= f.steps ||
          (f.eval_every > 0 && after % f.eval_every == 0) || checkpoints.saves_after(after))
        break;
    }
    std::vector<pt::HostBatch> host;
    for (const pt::TokenBatch& b : window) host.push_back({b.inputs(), b.targets()});
    const pt::TimedSteps window_stats = pt::train_timed(engine, host);
    train_seconds += window_stats.seconds;
    for (size_t k = 0; k < window_stats.stats.size(); ++k) {
      const pt::StepStats& st = window_stats.stats[k];
      const int64_t step_done = first + static_cast<int64_t>(k) + 1;
      recent_loss += st.loss;
      ++recent;
      ++steps_trained;
      pt::record_step(metrics, st, step_done, window_stats.step_seconds(), "tokens_per_s",
                      static_cast<double>(tokens_per_step));
      progress.update(step_done,
                      fmt::format("loss {:.4f}", recent_loss / static_cast<double>(recent)));
      if (step_done % f.log_every == 0) {  // the progress loss is over the last log_every steps
        recent_loss = 0;
        recent = 0;
      }
    }
    if (f.eval_every > 0 && engine.step() % f.eval_every == 0 && engine.step() < f.steps)
      evaluate();
    if (checkpoints.saves_after(engine.step())) progress.finish();  // the message on its own line
    checkpoints.after_step(engine, [&] { return state_of(engine); });
    if (engine.step() < f.steps && preemption.requested(world)) {  // collective over world
      preempted = preemption.which();
      break;
    }
  }
  progress.finish();
  if (preempted)
    fmt::print("stopping after step {} of {}: {} received{}\n", engine.step(), f.steps, preempted,
               f.checkpoints.save.empty() ? " (no --save given: nothing is written)" : "");
  checkpoints.at_end(engine, state_of(engine));
  if (preempted) {
    pt::examples::print_how_to_continue(preempted, engine.step(), f.checkpoints);
    return pt::kExitPreempted;
  }
  if (steps_trained == 0)  // only a resume gets here: --steps is >= 1
    fmt::print(
        "nothing left to train: checkpoint {} is already at step {}{} of the {} steps this run "
        "plans; reporting the checkpoint's validation loss\n",
        checkpoints.resumed_from().string(), engine.step(),
        engine.step() > f.steps ? ", past the end" : "", f.steps);
  evaluate();
  const double tokens_per_s =
      train_seconds > 0 ? static_cast<double>(steps_trained * tokens_per_step) / train_seconds : 0;
  if (steps_trained > 0)
    fmt::print(
        "trained {} steps in {:.1f} s ({:.0f} tokens/s; evaluation took {:.1f} s more); "
        "final validation loss {:.4f} nats/{}\n",
        steps_trained, train_seconds, tokens_per_s, eval_seconds, val_loss, unit);
  else
    fmt::print("final validation loss {:.4f} nats/{} (of the checkpoint; no step trained)\n",
               val_loss, unit);
  fmt::print("peak resident memory: {:.1f} MiB (this process)\n",
             static_cast<double>(pt::peak_resident_bytes()) / (1 << 20));
  metrics.write({{"event", std::string("done")},
                 {"step", engine.step()},
                 {"steps", steps_trained},
                 {"train_seconds", train_seconds},
                 {"tokens_per_s", tokens_per_s},
                 {"val_loss", val_loss},
                 {"peak_rss_bytes", static_cast<int64_t>(pt::peak_resident_bytes())}});
  pt::report_pipeline(par, setup, world);
  int status = 0;
  if (parity) status = parity->verdict();

  // ---- sampling: the trained parameters copied onto one device ----
  if (f.sample_bytes > 0 && token_file)  // the prompt is text, the ids are an outside tokenizer's
    fmt::print(
        "no sample: {} holds token ids, and pipetrain-gpt has no tokenizer to turn the prompt "
        "into them or them into text (--sample-bytes 0 leaves this line out)\n",
        corpus.source());
  if (f.sample_bytes > 0 && !token_file) {
    auto device = pt::make_cpu_backend(static_cast<int>(setup.backends.size()),
                                       setup.backends[0]->num_threads());
    device->bind_current_thread();
    pt::Model sampler = make_model();
    const auto t0 = std::chrono::steady_clock::now();
    const std::string text =
        pt::generate(sampler, engine.stage_states(), *device, f.prompt, sampling, world);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("sample ({} bytes in {:.1f} s; temperature {}, top-k {}, seed {}):\n{}{}\n",
               f.sample_bytes, dt, f.temperature, f.top_k, f.seed, f.prompt, text);
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "pipetrain-gpt: train a byte-level GPT on the King James Bible (or a text file) and sample "
      "from it"};
  pt::examples::GptFlags f;
  pt::examples::add_gpt_flags(app, f);
  if (const int code = pt::examples::parse_command_line(app, argc, argv); code >= 0) return code;
  return pt::run_main(
      f.par.timeout, [&](pt::Communicator* world) { return run(f, world); }, f.par.flight_recorder);
}
