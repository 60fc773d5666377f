#pragma once
// The subcommands of pipetrain-ckpt, one file each. Each takes a checkpoint folder already
// resolved (latest:DIR turned into a path by main), prints to stdout and returns the exit code;
// bad input (no such folder, not a checkpoint, a malformed manifest, an output path that cannot
// be written) is thrown as UsageError / FileError for main to report with exit code 2.
#include <filesystem>

namespace pt::ckpt {

// What the checkpoint holds: how it was saved, where training stood, the optimizer, the other
// settings, the pieces and every tensor. Reads the manifest only (no tensor bytes). Returns 0.
int inspect(const std::filesystem::path& checkpoint, bool as_json);

// The weights (and with `with_optimizer` the optimizer state) as one plain safetensors file,
// each tensor read through its CRC-32 check, the manifest's metadata copied. Returns 0.
int merge(const std::filesystem::path& checkpoint, const std::filesystem::path& out,
          bool with_optimizer);

// Every piece present and whole, every tensor matching its CRC-32. Returns 0 when so, else
// prints each problem and returns 1.
int verify(const std::filesystem::path& checkpoint);

}  // namespace pt::ckpt
