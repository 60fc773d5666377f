#pragma once
// The one rule for every path a program writes (--save, --save-init, --trace, --timeline,
// --metrics, --write-costs, --flight-recorder, pipetrain-ckpt merge OUT), checked where the
// program starts, before any data is loaded or any step runs: a path that cannot be written must
// cost the user nothing, not a whole training run. The rule:
//  - an empty path is refused (an unset shell variable must not silently mean "no output");
//  - missing folders above the path are created when it is written (as PyTorch's and Megatron's
//    savers do), so the check only asks that they can be: the nearest existing one must be a
//    writable folder, and nothing on the way may be a file;
//  - the path itself is absent, or what it should be (a regular file, or a folder for a folder
//    output), following symbolic links; anything else (a FIFO, a device, a socket, a folder where
//    a file is wanted) is refused, so that no temporary is ever renamed over it (as root, `--save
//    /dev/null` would otherwise replace /dev/null with a regular file);
//  - a dangling symbolic link is refused: writing would replace the link, not create its target.
#include <filesystem>
#include <string_view>

namespace pt {

enum class OutputKind { file, folder };

// Throws UsageError "WHAT PATH: what is wrong; what would fix it" unless `path` can be written
// as a `kind` by the rule above. `what` names the flag (e.g. "--save"). Looks only: creates
// nothing. Whether an existing file itself is writable is left to the writer (a rename over it
// needs only the folder).
void check_output_path(const std::filesystem::path& path, std::string_view what,
                       OutputKind kind = OutputKind::file);

// The part of check_output_path that does not depend on what the path is: refuses an empty path,
// a dangling symbolic link, and folders above it that cannot be created or written in (for
// writers with rules of their own about the target, such as checkpoint folders).
void check_output_parents(const std::filesystem::path& path, std::string_view what);

// check_output_path, then creates the missing folders above `path` (and, for a folder, `path`
// itself). Called by the writers (AtomicFileWriter, the metrics file, checkpoint folders, the
// flight recorder) just before they write; throws FileError when a folder cannot be created.
void prepare_output_path(const std::filesystem::path& path, std::string_view what,
                         OutputKind kind = OutputKind::file);

}  // namespace pt
