#include "engine/data/text_corpus.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <span>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/crc32.h"

namespace pt {

namespace {

// The whole Bible is 4.4 MB; anything much shorter means the program printed an error or a
// part only (a broken installation), which must not end up in the cache.
constexpr size_t kBibleMinBytes = 4'000'000;
constexpr const char* kBibleRange = "Gen1:1-Rev22:21";
// Not "bible-kjv.txt": caches written before the checksum header existed are not read.
constexpr const char* kBibleCacheName = "bible-kjv.cache";

// "a folder", "a FIFO", ... for the message that refuses it.
const char* file_kind(std::filesystem::file_type type) {
  using T = std::filesystem::file_type;
  switch (type) {
    case T::directory: return "a folder";
    case T::fifo: return "a FIFO (named pipe)";
    case T::character: return "a character device";
    case T::block: return "a block device";
    case T::socket: return "a socket";
    default: return "not a regular file";
  }
}

// True when `program` names an executable file, directly or through $PATH.
bool program_exists(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const size_t colon = rest.find(':');
    const std::string_view dir = rest.substr(0, colon);  // empty: the current folder
    const std::filesystem::path candidate =
        std::filesystem::path(dir.empty() ? std::string_view(".") : dir) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    if (colon == std::string_view::npos) return false;
    rest.remove_prefix(colon + 1);
  }
}

std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path) {
  // Opening a FIFO blocks until a writer comes (forever, for a typo), a device never ends: only
  // a regular file (or a link to one) is read. A missing file is left to the open's message.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw FileError(
        fmt::format("cannot read text corpus '{}': it is {}, not a regular file; give "
                    "a text file",
                    path.string(), file_kind(st.type())));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw FileError(fmt::format("cannot open text corpus '{}': {}; give an existing text file",
                                path.string(), std::strerror(errno)));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) throw FileError(fmt::format("cannot read text corpus '{}'", path.string()));
  return bytes;
}

// Runs `program -f <whole Bible>` and returns what it printed; FileError when it fails, or when
// it has not finished after `timeout_seconds` (a hung program must not hang training's start).
std::vector<uint8_t> run_bible(const std::string& program, double timeout_seconds) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    throw FileError(fmt::format("cannot run '{}': pipe: {}", program, std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::string arg0 = program, flag = "-f", range = kBibleRange;
  char* argv[] = {arg0.data(), flag.data(), range.data(), nullptr};
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (spawned != 0) {
    ::close(out[0]);
    throw FileError(fmt::format("cannot run '{}': {}", program, std::strerror(spawned)));
  }

  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::min(timeout_seconds, 1e6)));
  std::vector<uint8_t> bytes;
  bool timed_out = false;
  char buf[1 << 16];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{out[0], POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = ready == 0;
      break;
    }
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of output (or an error: the status and size below tell)
    bytes.insert(bytes.end(), buf, buf + n);
  }
  ::close(out[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    throw FileError(fmt::format(
        "'{} -f {}' did not finish within {} s (it printed {} bytes); it was stopped. Check "
        "that the program runs (reinstall Debian's bible-kjv) or give a text file instead",
        program, kBibleRange, timeout_seconds, bytes.size()));
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!ok || bytes.size() < kBibleMinBytes)
    throw FileError(fmt::format(
        "'{} -f {}' {} and printed {} bytes (the whole text is about 4.4 MB); reinstall Debian's "
        "package bible-kjv (apt-get install --reinstall bible-kjv) or give a text file instead",
        program, kBibleRange,
        ok                  ? "succeeded"
        : WIFEXITED(status) ? fmt::format("failed (status {})", WEXITSTATUS(status))
                            : fmt::format("was killed (signal {})", WTERMSIG(status)),
        bytes.size()));
  return bytes;
}

// The cache file: one header line "pipetrain-cache bytes=N crc32=XXXXXXXX", then the text. A
// file whose size or checksum does not match (a disk error, an edit, another program's file) is
// not used: the text is made again.
constexpr std::string_view kCacheMagic = "pipetrain-cache";

std::string cache_header(std::span<const uint8_t> bytes) {
  return fmt::format("{} bytes={} crc32={:08x}\n", kCacheMagic, bytes.size(),
                     crc32_of(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
}

// The cached text, or nothing when the file is absent or does not verify.
std::optional<std::vector<uint8_t>> read_verified_cache(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::vector<uint8_t> file;
  try {
    file = read_file_bytes(path);
  } catch (const FileError&) {
    return std::nullopt;
  }
  const auto newline = std::find(file.begin(), file.end(), uint8_t{'\n'});
  if (newline == file.end()) return std::nullopt;
  const std::string header(file.begin(), newline + 1);
  std::vector<uint8_t> text(newline + 1, file.end());
  if (header != cache_header(text)) return std::nullopt;
  return text;
}

void write_cache(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  const std::string header = cache_header(bytes);
  std::vector<std::byte> file(header.size() + bytes.size());
  std::memcpy(file.data(), header.data(), header.size());
  std::memcpy(file.data() + header.size(), bytes.data(), bytes.size());
  write_file_atomically(path, file);
}

}  // namespace

TokenCorpus byte_corpus(std::span<const uint8_t> bytes, std::string source) {
  // Every byte is below 256: the corpus's check of the ids cannot fail.
  return TokenCorpus(std::vector<uint16_t>(bytes.begin(), bytes.end()), kByteVocab,
                     std::move(source));
}

// ---- loading -----------------------------------------------------------------------------------
TokenCorpus load_text_corpus(const std::filesystem::path& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  if (bytes.empty())
    throw FileError(
        fmt::format("text corpus '{}' is empty; give a file with some text", path.string()));
  return byte_corpus(bytes, fmt::format("file '{}'", path.string()));
}

std::filesystem::path default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::filesystem::path(xdg) / "pipetrain";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::filesystem::path(home) / ".cache" / "pipetrain";
  return std::filesystem::temp_directory_path() / "pipetrain-cache";
}

TokenCorpus bible_corpus(const std::filesystem::path& cache_dir, const std::string& program,
                         double timeout_seconds) {
  const std::filesystem::path cached = cache_dir / kBibleCacheName;
  if (auto bytes = read_verified_cache(cached)) return byte_corpus(*bytes, "bible-kjv");
  if (!program_exists(program))
    throw FileError(
        fmt::format("the program '{}' was not found; it comes with Debian's package "
                    "bible-kjv (apt-get install bible-kjv), or give a text file "
                    "instead",
                    program));
  std::vector<uint8_t> bytes = run_bible(program, timeout_seconds);
  // The cache only saves the next run a tenth of a second and the decompression; a folder we
  // cannot write is no reason to fail.
  try {
    std::filesystem::create_directories(cache_dir);
    write_cache(cached, bytes);
  } catch (const std::exception&) {
  }
  return byte_corpus(bytes, "bible-kjv");
}

}  // namespace pt
