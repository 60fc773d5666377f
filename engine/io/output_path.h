#pragma once
// The one check for every file a program writes (--save, --save-init, --trace, --timeline,
// --metrics), made where the program starts, before any data is loaded or any step runs: a path
// that cannot be written must cost the user nothing, not a whole training run. It also keeps a
// temporary file from being renamed over something that is not a file (as root, `--save
// /dev/null` would otherwise replace /dev/null with a regular file).
#include <filesystem>
#include <string_view>

namespace pt {

// Throws UsageError "WHAT PATH: what is wrong; what would fix it" unless `path` can be written
// as a file: its folder exists and is a folder, `path` is absent or a regular file (following
// symbolic links: a link to a regular file is fine, a link to anything else is refused), and the
// folder is writable. `what` names the flag (e.g. "--save"). An empty path means no output:
// nothing to check. Whether an existing file itself is writable is left to the writer (a rename
// over it needs only the folder).
void check_output_path(const std::filesystem::path& path, std::string_view what);

}  // namespace pt
