#pragma once
// The training loop shared by the classification examples: batches from a Dataset, progress,
// metrics (JSON lines), evaluation after each epoch, checkpoints (--save, --save-init, --resume).
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "engine/data/dataset.h"
#include "engine/training_engine.h"

namespace pt {

struct FitOptions {
  int64_t batch = 256;  // B (global batch)
  int64_t epochs = 1;
  int64_t steps = 0;  // > 0: stop after this many optimizer steps in all (overrides epochs)
  bool shuffle = true;
  int64_t log_every = 50;
  int64_t save_every = 0;  // > 0: also checkpoint every this many steps
  std::filesystem::path metrics, save, save_init, resume;
  // Settings that must match when resuming (e.g. model, batch); stored in the checkpoint.
  std::map<std::string, std::string> settings;
};

struct FitResult {
  int64_t steps = 0;   // optimizer steps taken in this run
  double seconds = 0;  // wall time of the training steps
  double samples_per_second = 0;
  double last_loss = 0;
  EvalStats test;  // after the last step (samples == 0 when no test set)
};

// Number of optimizer steps `options` asks for on a data set of n samples.
int64_t planned_steps(const FitOptions& options, int64_t n);

// Checks options.save, save_init and metrics (check_output_path) before loading --resume or
// taking any step; throws UsageError naming the flag and the fix.
FitResult fit(TrainingEngine& trainer, const Dataset& train, const Dataset* test,
              const FitOptions& options);

}  // namespace pt
