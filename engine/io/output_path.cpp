#include "engine/io/output_path.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "engine/core/error.h"

namespace pt {
namespace {

std::string errno_text(int err) { return std::generic_category().message(err); }

// "a folder", "a character device" ...: what a non-regular file is, for the message.
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISREG(mode)) return "a regular file";
  return "not a regular file";
}

}  // namespace

void check_output_path(const std::filesystem::path& path, std::string_view what) {
  if (path.empty()) return;
  const std::string where = fmt::format("{} {}", what, path.string());
  if (!path.has_filename())
    throw UsageError(
        fmt::format("{}: the path ends in '/' and names a folder, not a file; add a "
                    "file name",
                    where));
  const std::filesystem::path dir = path.parent_path().empty() ? "." : path.parent_path();

  // 1. The folder: it must exist and be one.
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT)
      throw UsageError(
          fmt::format("{}: the folder {} does not exist; create it or choose another "
                      "path",
                      where, dir.string()));
    throw UsageError(fmt::format("{}: cannot use the folder {}: {}; choose another path", where,
                                 dir.string(), errno_text(err)));
  }
  if (!S_ISDIR(st.st_mode))
    throw UsageError(fmt::format("{}: {} is {}, not a folder; choose another path", where,
                                 dir.string(), kind_of(st.st_mode)));

  // 2. The target (following links): absent or a regular file. Checked before the folder's
  //    permissions so that /dev/null is called a device, not an unwritable /dev.
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      struct stat lst {};
      const bool link = ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode);
      throw UsageError(
          fmt::format("{}: it is {}{}, not a regular file, and writing would replace "
                      "it; choose the path of a regular file or of a new one",
                      where, link ? "a symbolic link to " : "", kind_of(st.st_mode)));
    }
  } else if (const int err = errno; err != ENOENT) {  // ENOENT: a new file (or a dangling link)
    throw UsageError(
        fmt::format("{}: cannot look at it: {}; choose another path", where, errno_text(err)));
  }

  // 3. The folder must take a new entry (the temporary file, or the new file itself).
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    const int err = errno;
    throw UsageError(
        fmt::format("{}: cannot write in the folder {}: {}; choose another path or "
                    "make the folder writable",
                    where, dir.string(), errno_text(err)));
  }
}

}  // namespace pt
