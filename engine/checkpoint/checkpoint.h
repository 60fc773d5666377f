#pragma once
// Saving and loading training state as a checkpoint folder (format: engine/checkpoint/manifest.h).
//   weights:          "{global_layer_index}.{layer_name}.{param}"          e.g. "3.fc2.weight"
//   optimizer state:  "optimizer.{global_layer_index}.{layer_name}.{param}.{slot}"
//                     slot = momentum_buffer | exp_avg | exp_avg_sq (PyTorch's names)
//   weight stash:     "stash.{global_layer_index}.{layer_name}.{param}" (--update async: the
//                     older weight version W(t - 1), which step t still computes with; saved
//                     and required on load when the stage has one, StageParameters::has_stash)
// Tensors are named by global layer index, so a checkpoint does not depend on how the model was
// laid out: any set of stages, replicas and processes covering the model can save it, and any
// other can load it (each process reads only the tensors of the stages it holds).
//
// Saving is collective when several processes hold the model: each writes the stages it holds
// into its own piece, in parallel (replicas of a stage are written once, by replica 0), then rank
// 0 writes the manifest and makes the checkpoint visible in one atomic rename. A job killed at
// any point leaves the previous checkpoint intact and never one that looks complete but is not.
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>

#include "engine/comm/communicator.h"
#include "engine/optim/optimizer.h"
#include "engine/train/stage_parameters.h"
#include "engine/train/stage_state.h"

namespace pt {

// Where training stands: enough to continue bit-identically (all randomness is counter-based,
// derived from the seed and these positions).
struct TrainingState {
  int64_t step = 0;            // optimizer steps taken
  int64_t epoch = 0;           // data position: current epoch
  int64_t batch_in_epoch = 0;  // data position: index of the next batch within the epoch
  uint64_t seed = 0;
  std::map<std::string, std::string> extra;   // program-defined settings, checked on resume
  std::map<std::string, std::string> layout;  // how it was saved (stages, replicas, ...): a record
};

struct SaveStats {
  double seconds = 0;        // this process: from the start to the committed checkpoint
  uint64_t bytes = 0;        // this process's piece (0 when it wrote none)
  uint64_t total_bytes = 0;  // all pieces
};

// Writes the checkpoint folder `path` (replacing a complete checkpoint there). `stages`: what this
// process writes (empty when another process writes the same stages). With `world`, every rank
// of it must call this with the same path and state; a rank that fails makes every rank throw.
// Throws FileError (disk full, permissions ...) or UsageError (the path is not a checkpoint).
SaveStats save_checkpoint(const std::filesystem::path& path, const Model& model,
                          std::span<const StageState> stages, const TrainingState& state,
                          Communicator* world = nullptr);

// Loads weights (and optimizer state, when the stages have optimizers) into `stages`, which may be
// any stages of the model (several copies of one stage, e.g. local replicas, are all filled).
// Throws FileError naming the checkpoint and what is wrong: not a checkpoint, written for another
// model, a piece missing, truncated or corrupt, optimizer state required but absent or of another
// kind.
TrainingState load_checkpoint(const std::filesystem::path& path, const Model& model,
                              std::span<const StageState> stages);

}  // namespace pt
