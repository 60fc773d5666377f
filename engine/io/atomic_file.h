#pragma once
// Writing a file so that nobody ever sees half of it. The bytes go to a temporary file in the
// same directory (`.NAME.tmp.PID.K`, same filesystem, so the final rename is atomic); commit()
// flushes them to disk and renames the temporary over the target, then syncs the directory so
// the rename itself survives a crash. Until commit() the old file stays untouched; a writer
// destroyed without commit() (an exception, an abort) deletes its temporary file. A crash of
// the whole process can leave a `.NAME.tmp.*` file behind, never a partial NAME.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>

namespace pt {

class AtomicFileWriter {
 public:
  // Creates the missing folders above `target` and the temporary file next to it; throws
  // UsageError when check_output_path (output_path.h) refuses `target` (an unwritable folder, a
  // device, a FIFO, a folder, a dangling link ...) and FileError when it cannot be created.
  explicit AtomicFileWriter(std::filesystem::path target);
  // Without a successful commit(): closes and deletes the temporary file.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Appends bytes (buffered). Throws FileError on a write error (disk full ...).
  void write(std::span<const std::byte> bytes);
  // fflush + fsync, rename over the target, fsync of the directory. Throws FileError on any
  // failure, and UsageError when the target is no longer absent or a regular file, leaving the
  // old target in place. Call once; no write() afterwards.
  void commit();

  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& temp_path() const { return temp_; }
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  void close_file();

  std::filesystem::path target_;
  std::filesystem::path temp_;
  std::FILE* file_ = nullptr;
  uint64_t bytes_written_ = 0;
  bool committed_ = false;
};

// The whole file in one call: write everything, then commit.
void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes);

}  // namespace pt
