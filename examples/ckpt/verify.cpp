// pipetrain-ckpt verify: verify_checkpoint's problems, one a line, or one line saying it is whole.
#include <cstddef>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/checkpoint/manifest.h"
#include "examples/ckpt/commands.h"

namespace pt::ckpt {

int verify(const std::filesystem::path& checkpoint) {
  const CheckpointManifest manifest = read_manifest(checkpoint);  // throws: not a checkpoint
  const std::vector<std::string> problems = verify_checkpoint(checkpoint);
  const double mib = static_cast<double>(manifest.total_bytes()) / (1024.0 * 1024.0);
  if (problems.empty()) {
    fmt::print("ok: {} tensors in {} piece{}, {:.1f} MiB, all checksums match\n",
               manifest.tensors.size(), manifest.pieces.size(),
               manifest.pieces.size() == 1 ? "" : "s", mib);
    return 0;
  }
  for (const std::string& problem : problems) fmt::print("{}\n", problem);
  fmt::print("damaged: {} problem{} in {}; do not load it\n", problems.size(),
             problems.size() == 1 ? "" : "s", checkpoint.string());
  return 1;
}

}  // namespace pt::ckpt
