#pragma once
// The training loop shared by the classification examples: batches from a Dataset, progress,
// metrics (JSON lines), evaluation after each epoch, checkpoints
// (engine/checkpoint/run_checkpoints.h), and a clean stop at SIGTERM / SIGINT
// (engine/process/preemption.h).
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "engine/checkpoint/run_checkpoints.h"
#include "engine/data/dataset.h"
#include "engine/train/training_engine.h"

namespace pt {

struct FitOptions {
  int64_t batch = 256;  // B (global batch)
  int64_t epochs = 1;
  int64_t steps = 0;  // > 0: stop after this many optimizer steps in all (overrides epochs)
  bool shuffle = true;
  int64_t log_every = 50;
  // --metrics: JSON lines. A resumed run keeps the lines up to the checkpoint's step and appends.
  std::filesystem::path metrics;
  // --save, --save-every, --keep, --save-init, --resume; `settings` (e.g. model) must match on
  // resume; batch and shuffling are added here.
  CheckpointOptions checkpoints;
  // All processes of an mpirun job (nullable): checkpoints and the stop-signal check are
  // collective over it.
  Communicator* world = nullptr;
  // When set, checkpoints are collective over this group instead of `world`: asynchronous
  // parameter-server workers meet at saves only, not at the per-step stop-signal check.
  Communicator* checkpoint_world = nullptr;
  // Stop at SIGTERM / SIGINT after the current step (and write the checkpoint when --save is
  // given): FitResult::preempted.
  bool watch_signals = true;
};

struct FitResult {
  int64_t steps = 0;   // optimizer steps taken in this run
  double seconds = 0;  // wall time of the training steps
  double samples_per_second = 0;
  double last_loss = 0;
  EvalStats test;                   // after the last step (samples == 0 when no test set)
  const char* preempted = nullptr;  // the signal that stopped training early, if any
};

// Number of optimizer steps `options` asks for on a data set of n samples.
int64_t planned_steps(const FitOptions& options, int64_t n);

// Checks the checkpoint and metrics paths before loading --resume or taking any step; throws
// UsageError naming the flag and the fix.
FitResult fit(TrainingEngine& trainer, const Dataset& train, const Dataset* test,
              const FitOptions& options);

}  // namespace pt
