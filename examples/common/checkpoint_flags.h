#pragma once
// The checkpoint flags every example shares (--save --save-every --keep --save-init --resume),
// registered with CLI11 as text and converted into the library's pt::CheckpointOptions
// (engine/checkpoint/run_checkpoints.h), and the line a run stopped by a signal ends with.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/checkpoint/run_checkpoints.h"

namespace pt::examples {

struct CheckpointFlags {
  std::string save, save_init, resume;
  int64_t save_every = 0;
  int keep = 0;
};

void add_checkpoint_flags(CLI::App& app, CheckpointFlags& f);

// The paths and numbers of the flags; the settings to match and the layout are the program's.
CheckpointOptions checkpoint_options(const CheckpointFlags& f);

// "stopped early (SIGTERM) after step 12: continue with --resume ckpt" (latest:DIR for numbered
// checkpoints; a note when nothing was saved).
void print_how_to_continue(const char* signal, int64_t step, const CheckpointFlags& f);

}  // namespace pt::examples
