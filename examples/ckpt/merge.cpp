// pipetrain-ckpt merge: the pieces of a checkpoint folder as one plain safetensors file, for
// tools that read one file (PyTorch's safetensors.torch.load_file, numpy, another framework).
// Tensor names are the checkpoint's own ("3.fc2.weight"); the manifest's metadata (step, seed,
// model_signature, ...) becomes the file's "__metadata__", all strings as safetensors requires.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "engine/checkpoint/manifest.h"
#include "engine/core/error.h"
#include "engine/io/output_path.h"
#include "engine/io/safetensors.h"
#include "examples/ckpt/commands.h"

namespace pt::ckpt {

namespace {

bool is_optimizer_state(const CheckpointTensor& t) {
  return std::string_view(t.name).starts_with("optimizer.");
}

}  // namespace

int merge(const std::filesystem::path& checkpoint, const std::filesystem::path& out,
          bool with_optimizer) {
  // Checked before any tensor is read: a path that cannot be written costs nothing.
  check_output_path(out, "merge OUT");
  // check_output_path accepts any regular file, but the checkpoint folder holds only the
  // checkpoint's own files: one of its pieces or its manifest replaced would destroy it.
  std::error_code ec_folder, ec_out;
  const std::filesystem::path folder = std::filesystem::weakly_canonical(checkpoint, ec_folder);
  const std::filesystem::path target = std::filesystem::weakly_canonical(out, ec_out);
  if (!ec_folder && !ec_out && target.parent_path() == folder)
    throw UsageError(fmt::format(
        "merge OUT {}: it is inside the checkpoint folder {}, which holds only the checkpoint's "
        "own files (a piece or the manifest would be replaced); write it somewhere else",
        out.string(), checkpoint.string()));
  const CheckpointManifest manifest = read_manifest(checkpoint);

  // Weights first, then optimizer state, each in manifest order: a reader that wants only the
  // weights finds them at the front of the data buffer whatever the pieces were.
  std::vector<const CheckpointTensor*> chosen;
  for (const CheckpointTensor& t : manifest.tensors)
    if (!is_optimizer_state(t)) chosen.push_back(&t);
  const size_t weights = chosen.size();
  if (with_optimizer)
    for (const CheckpointTensor& t : manifest.tensors)
      if (is_optimizer_state(t)) chosen.push_back(&t);

  // One tensor in memory at a time: merging never holds the whole model.
  std::vector<SafetensorsHeaderEntry> header;
  for (const CheckpointTensor* t : chosen) header.push_back({t->name, t->dtype, t->shape});
  SafetensorsWriter writer(out, header, manifest.metadata);  // atomic: a failure leaves no OUT
  uint64_t bytes = 0;
  for (const CheckpointTensor* t : chosen) {
    // read_checkpoint_tensor checks the CRC-32: a corrupt piece stops the merge with its name
    // instead of passing damaged weights on to another tool.
    writer.write(read_checkpoint_tensor(checkpoint, manifest, *t));
    bytes += t->bytes;
  }
  writer.commit();

  fmt::print("wrote {}: {} weight tensors{}, {:.1f} MiB, step {}\n", out.string(), weights,
             with_optimizer ? fmt::format(" and {} optimizer tensors", chosen.size() - weights)
                            : std::string(),
             static_cast<double>(bytes) / (1024.0 * 1024.0), manifest.meta("step"));
  return 0;
}

}  // namespace pt::ckpt
