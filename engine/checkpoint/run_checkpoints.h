#pragma once
// What a training program does with checkpoints, in one place (fit() and pipetrain-gpt use it):
// check the paths before any work, clean up what interrupted writes left, resume (checking that
// the run's settings match the checkpoint's), write the initial weights, numbered checkpoints
// every N steps with pruning, and the final one. Under mpirun every process makes the same calls
// (saving is collective; see checkpoint.h); only world rank 0 prints.
//
//   --save ckpt                       ckpt/ at the end (replaced atomically each time)
//   --save runs --save-every 100      runs/step-00000100/, runs/step-00000200/, ... and the last
//   --keep 3                          only the newest 3 numbered ones stay
//   --resume ckpt | latest:runs       continue from a checkpoint, or the newest complete one
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "engine/checkpoint/checkpoint.h"
#include "engine/comm/communicator.h"

namespace pt {

class TrainingEngine;

struct CheckpointOptions {
  std::filesystem::path save;       // --save
  int64_t save_every = 0;           // --save-every: numbered checkpoints in the folder `save`
  int keep = 0;                     // --keep: newest numbered checkpoints kept (0: all)
  std::filesystem::path save_init;  // --save-init: the weights before training
  std::string resume;               // --resume: a checkpoint, or latest:DIR
  // Settings that must be the same to resume (model, batch, shuffling, ...): recorded in the
  // checkpoint and compared on resume.
  std::map<std::string, std::string> settings;
  // How this run is laid out (stages, replicas, processes, schedule): recorded only.
  std::map<std::string, std::string> layout;

  // Throws UsageError naming the flag when a path cannot be written or the flags do not fit
  // together (--save-every or --keep without --save, negative values). Cheap: call it before
  // loading any data.
  void check() const;
};

class RunCheckpoints {
 public:
  // Checks the options and (world rank 0) removes temporaries that interrupted writes of these
  // checkpoint paths left behind.
  RunCheckpoints(CheckpointOptions options, Communicator* world);

  // Loads --resume into every stage copy the engine holds and sets its step; checks the seed and
  // the settings. Returns the checkpoint's state (for the data position), or nothing without
  // --resume. Throws UsageError / FileError naming the checkpoint and the difference.
  std::optional<TrainingState> resume(TrainingEngine& engine);
  // The checkpoint --resume named (latest:DIR resolved), or empty.
  const std::filesystem::path& resumed_from() const { return resumed_from_; }

  // Writes --save-init (weights only), when given.
  void save_init(TrainingEngine& engine, const TrainingState& state);
  // After an optimizer step: a numbered checkpoint when the step is a multiple of --save-every.
  void after_step(TrainingEngine& engine, const std::function<TrainingState()>& state);
  // Whether after_step writes a checkpoint after `step` (to end a progress line before it).
  bool saves_after(int64_t step) const;
  // At the end of training (or when preempted): the final checkpoint, unless --save is absent or
  // after_step already wrote this step.
  void at_end(TrainingEngine& engine, const TrainingState& state);

  const CheckpointOptions& options() const { return options_; }

 private:
  void save(TrainingEngine& engine, const std::filesystem::path& path, TrainingState state,
            bool with_optimizer);
  // The numbered checkpoint of the engine's step in --save, then pruning to --keep.
  void save_numbered(TrainingEngine& engine, const TrainingState& state);

  CheckpointOptions options_;
  Communicator* world_;
  std::filesystem::path resumed_from_;
  int64_t last_saved_step_ = -1;
};

}  // namespace pt
