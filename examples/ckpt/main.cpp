// pipetrain-ckpt: look into, check and convert checkpoint folders (engine/checkpoint/manifest.h)
// without the model or a training program.
//
//   pipetrain-ckpt inspect CKPT [--json]                  what it holds (manifest only)
//   pipetrain-ckpt verify CKPT                            every piece and checksum; exit 1 if not
//   pipetrain-ckpt merge CKPT OUT.safetensors [--with-optimizer]   one plain safetensors file
//
// CKPT may be latest:DIR, the newest complete numbered checkpoint in DIR (--save-every). Bad
// input (no such folder, not a checkpoint, a malformed manifest) is one "error: ..." line on
// stderr and exit code 2, as in the training programs.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/checkpoint/folders.h"
#include "engine/core/error.h"
#include "examples/ckpt/commands.h"
#include "examples/common/command_line.h"

namespace {

using pt::examples::kNotEmpty;

constexpr const char* kCheckpointHelp =
    "checkpoint folder (with manifest.json), or latest:DIR for the newest numbered one in DIR";

// CKPT as a folder: latest:DIR is the newest complete numbered checkpoint in DIR, found as
// resolve_resume finds it, with messages that name this program's argument instead of --resume.
std::filesystem::path checkpoint_folder(const std::string& arg) {
  constexpr std::string_view kLatest = "latest:";
  if (!arg.starts_with(kLatest)) return arg;
  const std::filesystem::path dir = arg.substr(kLatest.size());
  if (dir.empty())
    throw pt::UsageError(fmt::format(
        "CKPT {} names no folder: give latest:DIR, DIR being a folder of numbered checkpoints",
        arg));
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw pt::UsageError(fmt::format("CKPT {}: {} is not a folder", arg, dir.string()));
  const std::vector<std::filesystem::path> all = pt::numbered_checkpoints(dir);
  if (all.empty())
    throw pt::UsageError(
        fmt::format("CKPT {}: {} holds no complete numbered checkpoint (step-NNNNNNNN with a "
                    "manifest.json); name a checkpoint folder instead",
                    arg, dir.string()));
  return all.back();
}

int run(CLI::App& app, const std::string& checkpoint_arg, const std::string& out, bool as_json,
        bool with_optimizer) {
  const std::filesystem::path checkpoint = checkpoint_folder(checkpoint_arg);
  if (app.got_subcommand("inspect")) return pt::ckpt::inspect(checkpoint, as_json);
  if (app.got_subcommand("merge")) return pt::ckpt::merge(checkpoint, out, with_optimizer);
  return pt::ckpt::verify(checkpoint);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pipetrain-ckpt: inspect, verify or merge a pipetrain checkpoint folder"};
  app.require_subcommand(1);
  std::string checkpoint, out;
  bool as_json = false, with_optimizer = false;

  CLI::App* inspect = app.add_subcommand("inspect", "print what the checkpoint holds");
  inspect->add_option("CKPT", checkpoint, kCheckpointHelp)->required()->check(kNotEmpty);
  inspect->add_flag("--json", as_json, "print one JSON object instead of tables")
      ->group("Diagnostics");

  CLI::App* verify = app.add_subcommand(
      "verify", "check every piece and every tensor's CRC-32; exit 1 when anything is wrong");
  verify->add_option("CKPT", checkpoint, kCheckpointHelp)->required()->check(kNotEmpty);

  CLI::App* merge = app.add_subcommand(
      "merge", "write the weights as one safetensors file (PyTorch's load_file reads it)");
  merge->add_option("CKPT", checkpoint, kCheckpointHelp)->required()->check(kNotEmpty);
  merge
      ->add_option("OUT", out,
                   "the .safetensors file to write (replaced if it is a file; missing folders "
                   "above it are created)")
      ->required()
      ->check(kNotEmpty);
  merge
      ->add_flag("--with-optimizer", with_optimizer,
                 "also write the optimizer state (the optimizer.* tensors)")
      ->group("Checkpoints");

  // --help is 0; a bad command line is bad input (2).
  if (const int code = pt::examples::parse_command_line(app, argc, argv); code >= 0) return code;
  try {
    return run(app, checkpoint, out, as_json, with_optimizer);
  } catch (const pt::UsageError& e) {  // FileError too: missing, not a checkpoint, corrupt
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
