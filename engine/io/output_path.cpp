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

namespace fs = std::filesystem;

std::string errno_text(int err) { return std::generic_category().message(err); }

// "a folder", "a character device" ...: what a file is, for the message.
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISREG(mode)) return "a regular file";
  return "not a regular file";
}

// "dir/" names the folder dir; "" and "/" stay as they are.
fs::path without_trailing_slash(const fs::path& p) {
  return p.has_filename() || !p.has_parent_path() || p == p.root_path() ? p : p.parent_path();
}

fs::path folder_of(const fs::path& p) {
  return p.parent_path().empty() ? fs::path(".") : p.parent_path();
}

// A symbolic link whose target does not exist: a write would replace the link with a file or a
// folder instead of creating what it points to, which is seldom what was meant.
void refuse_dangling_link(const fs::path& p, const std::string& where) {
  struct stat lst {
  }, st{};
  if (::lstat(p.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) return;
  if (::stat(p.c_str(), &st) == 0 || errno != ENOENT) return;  // it leads somewhere
  std::error_code ec;
  const fs::path target = fs::read_symlink(p, ec);
  throw UsageError(fmt::format(
      "{}: {} is a symbolic link to {}, which does not exist, and writing would replace the "
      "link; create its target, remove the link, or choose another path",
      where, p.string(), ec ? std::string("a missing path") : target.string()));
}

void refuse_empty(const fs::path& path, std::string_view what) {
  if (path.empty())
    throw UsageError(fmt::format(
        "{}: the path is empty (an unset shell variable?); give a path, or leave {} out", what,
        what));
}

// The nearest existing folder above `path` (missing ones are created when it is written). Throws
// when something on the way is not a folder or a dangling link, or cannot be looked at.
fs::path nearest_existing_folder(const fs::path& path, const std::string& where) {
  fs::path dir = folder_of(path);
  for (;;) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        throw UsageError(fmt::format("{}: {} is {}, not a folder; choose another path", where,
                                     dir.string(), kind_of(st.st_mode)));
      return dir;
    }
    const int err = errno;
    if (err != ENOENT && err != ENOTDIR)
      throw UsageError(fmt::format("{}: cannot use the folder {}: {}; choose another path", where,
                                   dir.string(), errno_text(err)));
    refuse_dangling_link(dir, where);
    const fs::path up = folder_of(dir);
    if (up == dir) return dir;  // cannot happen: "/" and "." exist
    dir = up;
  }
}

// The folder must take new entries: the missing folders, the temporary file, the new file.
void check_writable_folder(const fs::path& dir, const std::string& where, bool missing_below) {
  if (::access(dir.c_str(), W_OK | X_OK) == 0) return;
  const int err = errno;
  throw UsageError(fmt::format(
      "{}: cannot {} in the folder {}: {}; choose another path or make the folder writable", where,
      missing_below ? "create the missing folders" : "write", dir.string(), errno_text(err)));
}

}  // namespace

void check_output_parents(const fs::path& given, std::string_view what) {
  refuse_empty(given, what);
  const fs::path path = without_trailing_slash(given);
  const std::string where = fmt::format("{} {}", what, given.string());
  const fs::path dir = nearest_existing_folder(path, where);
  refuse_dangling_link(path, where);
  check_writable_folder(dir, where, dir != folder_of(path));
}

void check_output_path(const fs::path& given, std::string_view what, OutputKind kind) {
  refuse_empty(given, what);
  const std::string where = fmt::format("{} {}", what, given.string());
  if (kind == OutputKind::file && !given.has_filename())
    throw UsageError(fmt::format(
        "{}: the path ends in '/' and names a folder, not a file; add a file name", where));
  const fs::path path = without_trailing_slash(given);

  // 1. The folders above it: existing folders, or missing ones that can be created.
  const fs::path dir = nearest_existing_folder(path, where);
  const bool missing = dir != folder_of(path);

  // 2. The target (following links): absent, or what it should be. Checked before the folder's
  //    permissions so that /dev/null is called a device, not an unwritable /dev.
  struct stat st {};
  if (!missing && ::stat(path.c_str(), &st) == 0) {
    struct stat lst {};
    const bool link = ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode);
    const char* via = link ? "a symbolic link to " : "";
    if (kind == OutputKind::file && !S_ISREG(st.st_mode))
      throw UsageError(
          fmt::format("{}: it is {}{}, not a regular file, and writing would replace "
                      "it; choose the path of a regular file or of a new one",
                      where, via, kind_of(st.st_mode)));
    if (kind == OutputKind::folder) {
      if (!S_ISDIR(st.st_mode))
        throw UsageError(
            fmt::format("{}: it is {}{}, not a folder; choose the path of a folder or of a new one",
                        where, via, kind_of(st.st_mode)));
      if (::access(path.c_str(), W_OK | X_OK) != 0) {
        const int err = errno;
        throw UsageError(
            fmt::format("{}: cannot write in it: {}; choose another folder or make it writable",
                        where, errno_text(err)));
      }
      return;
    }
  } else if (!missing) {
    const int err = errno;
    if (err != ENOENT)
      throw UsageError(
          fmt::format("{}: cannot look at it: {}; choose another path", where, errno_text(err)));
    refuse_dangling_link(path, where);
  }

  // 3. The nearest existing folder must take a new entry.
  check_writable_folder(dir, where, missing);
}

void prepare_output_path(const fs::path& given, std::string_view what, OutputKind kind) {
  check_output_path(given, what, kind);
  const fs::path path = without_trailing_slash(given);
  const fs::path make = kind == OutputKind::folder ? path : folder_of(path);
  std::error_code ec;
  fs::create_directories(make, ec);
  if (ec)
    throw FileError(fmt::format("{} {}: creating the folder {} failed: {}; choose another path",
                                what, given.string(), make.string(), ec.message()));
}

}  // namespace pt
