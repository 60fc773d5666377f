#pragma once
// pipetrain-gpt's command line: its flags (registered with CLI11) and every check made on them
// before any work, apart from running: main.cpp trains with what check_gpt_flags returns, and
// tests/fuzz/gpt_flags_fuzz.cpp fuzzes the two without training.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/checkpoint/run_checkpoints.h"
#include "engine/inference/generate.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/setup/training_options.h"
#include "examples/common/checkpoint_flags.h"
#include "examples/common/parallel_flags.h"

namespace pt::examples {

struct GptFlags {
  // model
  int64_t context = 128, d_model = 256;
  int layers = 4, heads = 4;
  // training
  int64_t steps = 200, batch = 16;
  std::string optim = "adamw";
  float lr = 3e-4f, weight_decay = 0.f, clip = 1.f, min_lr = 0.f;
  float momentum = 0.9f;  // sgd
  bool nesterov = false;  // sgd
  std::string lr_schedule = "constant";
  int64_t warmup = 0;
  uint64_t seed = 0;
  // data and evaluation
  std::string data;                  // empty: the Bible
  std::string data_format = "auto";  // auto, text, llmc or uint16 (engine/data/token_file.h)
  std::optional<int64_t> vocab;      // a token file's vocabulary
  double val_fraction = 0.1;
  int64_t eval_every = 50, eval_windows = 256;
  // sampling
  std::string prompt = "And God said";
  float temperature = 0.8f;
  int64_t top_k = 0, sample_bytes = 300;
  // output
  ParallelFlags par;
  std::string metrics;
  int64_t log_every = 20;
  bool summary = false, untied = false, parity_check = false;
  CheckpointFlags checkpoints;
};

void add_gpt_flags(CLI::App& app, GptFlags& f);

// The flags as the library's typed options, every one checked.
struct GptOptions {
  OptimizerConfig optimizer;
  SamplingOptions sampling;
  TrainingOptions parallel;
  CheckpointOptions checkpoints;  // with the settings a resumed checkpoint must match (the data
                                  // source is added once the text is read)
  LrSchedule::Kind lr_schedule = LrSchedule::Kind::constant;
};

// Throws UsageError naming the first flag that is out of range or does not combine with the
// others. Writes nothing: output paths are only looked at (check_output_path).
GptOptions check_gpt_flags(const GptFlags& f);

}  // namespace pt::examples
