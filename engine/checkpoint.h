#pragma once
// Checkpoints: one safetensors file, written atomically (temp file + fsync + rename).
//   weights:          "{global_layer_index}.{layer_name}.{param}"          e.g. "3.fc2.weight"
//   optimizer state:  "optimizer.{global_layer_index}.{layer_name}.{param}.{slot}"
//                     slot = momentum_buffer | exp_avg | exp_avg_sq (PyTorch's names)
//   __metadata__:     format, model signature, step, data position, seed, optimizer settings,
//                     plus whatever the program adds (batch size, ...).
// Tensors are named by global layer index, so a checkpoint does not depend on how the model was
// partitioned: any set of stages covering the model can save or load it.
#include <filesystem>
#include <map>
#include <span>
#include <string>

#include "engine/optimizer.h"
#include "engine/stage_parameters.h"

namespace pt {

// Where training stands: enough to continue bit-identically (all randomness is counter-based,
// derived from the seed and these positions).
struct TrainingState {
  int64_t step = 0;            // optimizer steps taken
  int64_t epoch = 0;           // data position: current epoch
  int64_t batch_in_epoch = 0;  // data position: index of the next batch within the epoch
  uint64_t seed = 0;
  std::map<std::string, std::string> extra;  // program-defined settings, checked on resume
};

// The state of one stage as the checkpoint sees it; `optimizer` may be null (weights only).
struct StageState {
  StageParameters* params = nullptr;
  Optimizer* optimizer = nullptr;
};

void save_checkpoint(const std::filesystem::path& path, const Model& model,
                     std::span<const StageState> stages, const TrainingState& state);

// Loads weights (and optimizer state, when the stages have optimizers) into the stages.
// Throws FileError when the file is corrupt or was written for another model (naming the first
// difference), or when optimizer state is required but absent or of another kind.
TrainingState load_checkpoint(const std::filesystem::path& path, const Model& model,
                              std::span<const StageState> stages);

}  // namespace pt
