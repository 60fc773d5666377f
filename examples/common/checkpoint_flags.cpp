#include "examples/common/checkpoint_flags.h"

#include <fmt/format.h>

namespace pt::examples {

void add_checkpoint_flags(CLI::App& app, CheckpointFlags& f) {
  app.add_option("--save", f.save,
                 "write a checkpoint (a folder) here at the end, or, with --save-every, the "
                 "folder of numbered checkpoints");
  app.add_option("--save-every", f.save_every,
                 "write a numbered checkpoint --save/step-NNNNNNNN every N steps (and at the end)");
  app.add_option("--keep", f.keep, "keep only the newest K numbered checkpoints (0: all)");
  app.add_option("--save-init", f.save_init,
                 "write the initial weights (a checkpoint folder) here");
  app.add_option("--resume", f.resume,
                 "continue from this checkpoint, or latest:DIR for the newest one in DIR");
}

CheckpointOptions checkpoint_options(const CheckpointFlags& f) {
  CheckpointOptions o;
  o.save = f.save;
  o.save_every = f.save_every;
  o.keep = f.keep;
  o.save_init = f.save_init;
  o.resume = f.resume;
  return o;
}

void print_how_to_continue(const char* signal, int64_t step, const CheckpointFlags& f) {
  fmt::print("stopped early ({}) after step {}: continue with --resume {}\n", signal, step,
             f.save.empty()     ? std::string("(nothing was saved: give --save)")
             : f.save_every > 0 ? "latest:" + f.save
                                : f.save);
}

}  // namespace pt::examples
