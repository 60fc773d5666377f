#include "examples/common/checkpoint_flags.h"

#include <fmt/format.h>

#include "examples/common/command_line.h"
#include "examples/common/integer_text.h"

namespace pt::examples {

void add_checkpoint_flags(CLI::App& app, CheckpointFlags& f) {
  app.add_option("--save", f.save,
                 "write a checkpoint (a folder) here at the end, or, with --save-every, the "
                 "folder of numbered checkpoints; missing folders above it are created (default: "
                 "none)")
      ->check(kNotEmpty);
  app.add_option("--save-every", f.save_every,
                 "write a numbered checkpoint --save/step-NNNNNNNN every N steps (and at the end; "
                 "0: only at the end)")
      ->capture_default_str()
      ->check(integer_text<int64_t>(">= 0 (0: only at the end)"));
  app.add_option("--keep", f.keep, "keep only the newest K numbered checkpoints (0: all)")
      ->capture_default_str()
      ->check(integer_text<int>(">= 0 (0: keep all)"));
  app.add_option("--save-init", f.save_init,
                 "write the initial weights (a checkpoint folder) here (default: none)")
      ->check(kNotEmpty);
  app.add_option("--resume", f.resume,
                 "continue from this checkpoint, or latest:DIR for the newest one in DIR "
                 "(default: none, start from scratch)")
      ->check(kNotEmpty);
  set_group(app, "Checkpoints", {"--save", "--save-every", "--keep", "--save-init", "--resume"});
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
