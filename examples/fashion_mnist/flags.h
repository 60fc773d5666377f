#pragma once
// pipetrain-fashion's command line: its flags (registered with CLI11) and every check made on
// them before any work, apart from running: main.cpp trains with what check_fashion_flags
// returns, and tests/fuzz/fashion_flags_fuzz.cpp fuzzes the two without training.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/checkpoint/run_checkpoints.h"
#include "engine/data/dataset.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/setup/training_options.h"
#include "examples/common/checkpoint_flags.h"
#include "examples/common/parallel_flags.h"

namespace pt::examples {

struct FashionFlags {
  std::string model = "mlp";
  int64_t epochs = 3, steps = 0, batch = 256;
  std::string optim = "sgd";
  float lr = 0.05f, momentum = 0.9f, weight_decay = 0.f, clip = 0.f;
  bool nesterov = false;
  std::string lr_schedule = "constant";
  int64_t warmup = 0;
  uint64_t seed = 0;
  bool no_shuffle = false, parity_check = false;
  ParallelFlags par;
  std::string data = kFashionMnistDir;
  std::string metrics;
  CheckpointFlags checkpoints;
  int64_t log_every = 50;
  bool summary = false;
};

void add_fashion_flags(CLI::App& app, FashionFlags& f);

// The flags as the library's typed options, every one checked.
struct FashionOptions {
  OptimizerConfig optimizer;
  TrainingOptions parallel;
  CheckpointOptions checkpoints;  // with the settings a resumed checkpoint must match
  LrSchedule::Kind lr_schedule = LrSchedule::Kind::constant;
};

// Throws UsageError naming the first flag that is out of range or does not combine with the
// others. Writes nothing: output paths are only looked at (check_output_path).
FashionOptions check_fashion_flags(const FashionFlags& f);

}  // namespace pt::examples
