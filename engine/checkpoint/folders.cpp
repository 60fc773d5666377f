#include "engine/checkpoint/folders.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2 (glibc >= 2.28)
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <system_error>

#include <fmt/format.h>

#include "engine/checkpoint/manifest.h"
#include "engine/core/error.h"
#include "engine/io/output_path.h"

namespace pt {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int err) { return std::generic_category().message(err); }

// "ckpt/" names the folder ckpt.
fs::path without_trailing_slash(const fs::path& p) {
  return p.has_filename() || !p.has_parent_path() ? p : p.parent_path();
}

fs::path parent_of(const fs::path& p) {
  return p.parent_path().empty() ? fs::path(".") : p.parent_path();
}

constexpr std::string_view kStepPrefix = "step-";

// The step of a "step-00000100" name, or -1.
int64_t step_of(const std::string& name) {
  if (name.rfind(kStepPrefix, 0) != 0 || name.size() == kStepPrefix.size()) return -1;
  int64_t step = -1;
  const char* b = name.data() + kStepPrefix.size();
  const char* e = name.data() + name.size();
  auto [p, ec] = std::from_chars(b, e, step);
  return ec == std::errc() && p == e && step >= 0 ? step : -1;
}

}  // namespace

bool is_checkpoint(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(path / kManifestName, ec);
}

void check_checkpoint_path(const fs::path& given, std::string_view what, bool numbered) {
  if (given.empty()) return;
  const fs::path path = without_trailing_slash(given);
  const std::string where = fmt::format("{} {}", what, given.string());
  // The rule every output path follows (engine/io/output_path.h): missing folders above it are
  // created when it is written, a dangling link is refused; the rest is a checkpoint's own.
  check_output_parents(given, what);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      throw UsageError(
          fmt::format("{}: it exists and is not a folder (checkpoints are folders: pieces and a "
                      "manifest.json); remove it or choose a new path",
                      where));
    if (numbered && is_checkpoint(path))
      throw UsageError(fmt::format(
          "{}: it is a checkpoint itself, not a folder of numbered checkpoints (--save-every "
          "writes {}/step-NNNNNNNN); choose another folder",
          where, path.string()));
    if (!numbered && !is_checkpoint(path))
      throw UsageError(fmt::format(
          "{}: it is a folder but not a checkpoint (no {}), and writing would replace it; "
          "remove it or choose a new path{}",
          where, kManifestName,
          numbered_checkpoints(path).empty()
              ? ""
              : " (it holds numbered checkpoints: add --save-every to add to them)"));
    if (numbered && ::access(path.c_str(), W_OK | X_OK) != 0)
      throw UsageError(
          fmt::format("{}: cannot write in it: {}; make it writable", where, errno_text(errno)));
  } else if (errno != ENOENT && errno != ENOTDIR) {
    throw UsageError(fmt::format("{}: cannot look at it: {}", where, errno_text(errno)));
  }
}

fs::path make_temporary_folder(const fs::path& given) {
  static std::atomic<int> counter{0};
  const fs::path target = without_trailing_slash(given);
  std::error_code ec;  // the missing folders above it (engine/io/output_path.h)
  fs::create_directories(parent_of(target), ec);
  if (ec)
    throw FileError(fmt::format("cannot create the folder {} for the checkpoint {}: {}",
                                parent_of(target).string(), target.string(), ec.message()));
  const fs::path temp = parent_of(target) / fmt::format(".{}.tmp.{}.{}", target.filename().string(),
                                                        ::getpid(), counter++);
  if (::mkdir(temp.c_str(), 0755) != 0)
    throw FileError(fmt::format("cannot create the temporary checkpoint folder {}: {}",
                                temp.string(), errno_text(errno)));
  return temp;
}

void sync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw FileError(fmt::format("cannot open {} to sync it: {}", path.string(), errno_text(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some filesystems cannot fsync a folder (EINVAL); the data itself was synced.
  if (rc != 0 && err != EINVAL)
    throw FileError(fmt::format("fsync of {} failed: {}", path.string(), errno_text(err)));
}

void commit_folder(const fs::path& temporary, const fs::path& given) {
  const fs::path target = without_trailing_slash(given);
  sync_path(temporary);
  std::error_code ec;
  if (!fs::exists(target, ec)) {
    if (::rename(temporary.c_str(), target.c_str()) != 0)
      throw FileError(fmt::format("cannot rename {} to {}: {}", temporary.string(), target.string(),
                                  errno_text(errno)));
  } else {
    if (!is_checkpoint(target))  // checked at start; something else appeared since
      throw UsageError(fmt::format("{} is no longer a checkpoint; the new checkpoint stays in {}",
                                   target.string(), temporary.string()));
    // One atomic step: the temporary becomes the target and the old checkpoint the temporary.
    if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
      throw FileError(fmt::format(
          "cannot replace the checkpoint {} atomically (renameat2 RENAME_EXCHANGE: {}); the new "
          "checkpoint stays in {}",
          target.string(), errno_text(errno), temporary.string()));
    fs::remove_all(temporary, ec);  // the old checkpoint; a leftover is cleaned by a later run
  }
  sync_path(parent_of(target));
}

int remove_stale_temporaries(const fs::path& given) {
  const fs::path target = without_trailing_slash(given);
  const fs::path dir = parent_of(target);
  const std::string prefix = fmt::format(".{}.tmp.", target.filename().string());
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    std::error_code rm;
    if (fs::remove_all(entry.path(), rm) > 0 && !rm) ++removed;
  }
  return removed;
}

fs::path numbered_checkpoint(const fs::path& dir, int64_t step) {
  return without_trailing_slash(dir) / fmt::format("{}{:08}", kStepPrefix, step);
}

std::vector<fs::path> numbered_checkpoints(const fs::path& given) {
  const fs::path dir = without_trailing_slash(given);
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && is_checkpoint(entry.path())) found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

void keep_newest(const fs::path& dir, int keep) {
  if (keep <= 0) return;
  const std::vector<fs::path> all = numbered_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) {
    // Removed in two steps so that a crash never leaves a half-removed folder that still has its
    // manifest: first the manifest (it stops being a checkpoint), then the rest.
    std::error_code ec;
    fs::remove(all[i] / kManifestName, ec);
    fs::remove_all(all[i], ec);
  }
}

fs::path resolve_resume(const std::string& arg) {
  constexpr std::string_view kLatest = "latest:";
  if (arg.rfind(kLatest, 0) != 0) return arg;
  const fs::path dir = arg.substr(kLatest.size());
  if (dir.empty())
    throw UsageError(fmt::format(
        "--resume {} names no folder: give latest:DIR, DIR being the folder that --save DIR "
        "--save-every N wrote its numbered checkpoints to",
        arg));
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError(fmt::format("--resume {}: {} is not a folder", arg, dir.string()));
  const std::vector<fs::path> all = numbered_checkpoints(dir);
  if (all.empty())
    throw UsageError(
        fmt::format("--resume {}: {} holds no complete numbered checkpoint (step-NNNNNNNN with a "
                    "manifest.json); start without --resume, or name a checkpoint",
                    arg, dir.string()));
  return all.back();
}

}  // namespace pt
