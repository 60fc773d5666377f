#include "engine/io/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <system_error>

#include "engine/core/error.h"
#include "engine/io/output_path.h"

namespace pt {
namespace {

std::string errno_text(int err) { return std::generic_category().message(err); }

// `.NAME.tmp.PID.K`: hidden, in the target's directory, unique per process and writer (two
// threads saving the same file each get their own temporary; the last rename wins, whole).
std::filesystem::path temp_path_for(const std::filesystem::path& target) {
  static std::atomic<uint64_t> counter{0};
  const std::string name = fmt::format(".{}.tmp.{}.{}", target.filename().string(),
                                       static_cast<long>(::getpid()), counter++);
  return target.parent_path() / name;
}

std::filesystem::path directory_of(const std::filesystem::path& target) {
  return target.parent_path().empty() ? std::filesystem::path(".") : target.parent_path();
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path target) : target_(std::move(target)) {
  if (target_.filename().empty())
    throw UsageError(
        fmt::format("cannot write '{}': the path names a directory, not a file", target_.string()));
  // Before any byte is written: an unwritable folder, or a target that is not a regular file (a
  // device, a FIFO, a folder, a link to one or a dangling link), which the rename would replace.
  // Missing folders above it are created.
  prepare_output_path(target_, "cannot write");
  temp_ = temp_path_for(target_);
  const int fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    throw FileError(fmt::format("cannot write '{}': creating '{}' failed: {}", target_.string(),
                                temp_.string(), errno_text(err)));
  }
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int err = errno;
    ::close(fd);
    ::unlink(temp_.c_str());
    throw FileError(fmt::format("cannot write '{}': {}", target_.string(), errno_text(err)));
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  close_file();
  if (!committed_) ::unlink(temp_.c_str());  // errors ignored: nothing useful to do here
}

void AtomicFileWriter::close_file() {
  if (file_ != nullptr) {
    std::fclose(file_);
    file_ = nullptr;
  }
}

void AtomicFileWriter::write(std::span<const std::byte> bytes) {
  if (file_ == nullptr)
    throw UsageError(
        fmt::format("AtomicFileWriter for '{}': write after commit or failure", target_.string()));
  if (bytes.empty()) return;
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
    const int err = errno;
    close_file();  // the destructor deletes the temporary file
    throw FileError(fmt::format("cannot write '{}': writing {} bytes at offset {} failed: {}",
                                target_.string(), bytes.size(), bytes_written_, errno_text(err)));
  }
  bytes_written_ += bytes.size();
}

void AtomicFileWriter::commit() {
  if (file_ == nullptr)
    throw UsageError(
        fmt::format("AtomicFileWriter for '{}': commit after commit or failure", target_.string()));
  auto fail = [&](const std::string& what, int err) {
    close_file();
    return FileError(
        fmt::format("cannot write '{}': {} failed: {}", target_.string(), what, errno_text(err)));
  };
  // 1. The data: out of stdio's buffer, then out of the page cache onto the disk.
  if (std::fflush(file_) != 0) throw fail("flushing", errno);
  if (::fsync(::fileno(file_)) != 0) throw fail("fsync", errno);
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0) throw fail("closing", errno);
  // 2. The switch: readers see either the old file or the new one, never a mix. The target is
  //    checked again: something that is not a regular file may have appeared there meanwhile.
  check_output_path(target_, "cannot write");
  if (std::rename(temp_.c_str(), target_.c_str()) != 0) {
    const int err = errno;
    throw fail(fmt::format("renaming '{}' over it", temp_.string()), err);
  }
  committed_ = true;
  // 3. The directory entry, so the rename survives a power cut. Some filesystems cannot fsync
  //    a directory (EINVAL); the file is complete either way.
  const std::filesystem::path dir = directory_of(target_);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    const int err = errno;
    throw FileError(fmt::format("wrote '{}' but cannot open its directory to sync it: {}",
                                target_.string(), errno_text(err)));
  }
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL)
    throw FileError(fmt::format("wrote '{}' but syncing its directory failed: {}", target_.string(),
                                errno_text(err)));
}

void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes);
  writer.commit();
}

}  // namespace pt
