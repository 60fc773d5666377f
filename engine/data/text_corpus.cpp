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

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/random.h"
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

void check_window(std::string_view what, int64_t batch, int64_t context) {
  if (batch < 1 || context < 1)
    throw UsageError(
        fmt::format("{}: batch {} and context {} must be at least 1", what, batch, context));
}

// Writes window [start, start + T) into row b of the batch.
void put_window(const std::vector<uint8_t>& bytes, int64_t start, int64_t b, TextBatch& out) {
  const int64_t T = out.context;
  for (int64_t t = 0; t < T; ++t) {
    const auto i = static_cast<size_t>(start + t);
    out.input_ids[static_cast<size_t>(b * T + t)] = bytes[i];
    out.target_ids[static_cast<size_t>(b * T + t)] = bytes[i + 1];
  }
}

TextBatch empty_batch(int64_t batch, int64_t context) {
  TextBatch out;
  out.batch = batch;
  out.context = context;
  out.input_ids.resize(static_cast<size_t>(batch * context));
  out.target_ids.resize(static_cast<size_t>(batch * context));
  return out;
}

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

// ---- batches ---------------------------------------------------------------------------------
Tensor TextBatch::inputs() const {
  return Tensor::borrow(const_cast<int32_t*>(input_ids.data()), Shape{batch, context}, DType::i32);
}
Tensor TextBatch::targets() const {
  return Tensor::borrow(const_cast<int32_t*>(target_ids.data()), Shape{batch, context}, DType::i32);
}

TextCorpus::TextCorpus(std::vector<uint8_t> bytes, std::string source)
    : bytes_(std::move(bytes)), source_(std::move(source)) {}

TextCorpus::Split TextCorpus::split(double validation_fraction) const {
  if (!(validation_fraction > 0.0 && validation_fraction < 1.0))
    throw UsageError(
        fmt::format("the validation fraction must be between 0 and 1 (exclusive) but "
                    "got {}",
                    validation_fraction));
  const auto n_val = static_cast<int64_t>(static_cast<double>(size()) * validation_fraction);
  const int64_t n_train = size() - n_val;
  if (n_val < 2 || n_train < 2)
    throw UsageError(
        fmt::format("{} has {} bytes: too few to split {} / {} into training and "
                    "validation; use a longer text or another fraction",
                    source_, size(), n_train, n_val));
  const auto cut = bytes_.begin() + n_train;
  return {TextCorpus({bytes_.begin(), cut}, source_ + " (training part)"),
          TextCorpus({cut, bytes_.end()}, source_ + " (validation part)")};
}

TextBatch TextCorpus::sample_batch(int64_t batch, int64_t context, uint64_t seed,
                                   int64_t step) const {
  check_window("sample_batch", batch, context);
  if (size() < context + 1)
    throw UsageError(
        fmt::format("{} has {} bytes but a window of context {} needs {} (inputs and "
                    "targets shifted by one); use a shorter --context or a longer text",
                    source_, size(), context, context + 1));
  // Starts in [0, size - T - 1]: the last target is bytes[start + T] < size.
  const auto starts = static_cast<uint64_t>(size() - context);
  CounterRng rng(hash_keys(hash_keys(seed, 0x7e47), static_cast<uint64_t>(step)));
  TextBatch out = empty_batch(batch, context);
  for (int64_t b = 0; b < batch; ++b)
    put_window(bytes_, static_cast<int64_t>(rng.next_below(starts)), b, out);
  return out;
}

int64_t TextCorpus::window_count(int64_t context) const {
  check_window("window_count", 1, context);
  return size() < 1 ? 0 : (size() - 1) / context;
}

TextBatch TextCorpus::windows(int64_t first, int64_t count, int64_t context) const {
  check_window("windows", count, context);
  if (first < 0 || first + count > window_count(context))
    throw UsageError(fmt::format("windows [{}, {}) of context {}: {} has only {}", first,
                                 first + count, context, source_, window_count(context)));
  TextBatch out = empty_batch(count, context);
  for (int64_t b = 0; b < count; ++b) put_window(bytes_, (first + b) * context, b, out);
  return out;
}

// ---- evaluation windows ----------------------------------------------------------------------
WindowIterator::WindowIterator(const TextCorpus& corpus, int64_t batch, int64_t context,
                               int64_t max_windows)
    : corpus_(&corpus), batch_(batch), context_(context) {
  check_window("evaluation windows", batch, context);
  if (max_windows < 0)
    throw UsageError(fmt::format(
        "the number of evaluation windows must be >= 0 (0: all) but got {}", max_windows));
  const int64_t total = corpus.window_count(context);
  if (total < 1)
    throw UsageError(
        fmt::format("{} has {} bytes: no evaluation window of context {} fits (it "
                    "needs {}); use a shorter context or more validation text",
                    corpus.source(), corpus.size(), context, context + 1));
  if (max_windows > 0 && max_windows < total) {
    stride_ = total / max_windows;
    selected_ = std::min(max_windows, (total + stride_ - 1) / stride_);
  } else {
    selected_ = total;
  }
}

bool WindowIterator::next(TextBatch& out) {
  if (done_ >= selected_) return false;
  const int64_t count = std::min(batch_, selected_ - done_);
  out = empty_batch(count, context_);
  for (int64_t b = 0; b < count; ++b)
    put_window(corpus_->bytes(), (done_ + b) * stride_ * context_, b, out);
  done_ += count;
  return true;
}

// ---- loading -----------------------------------------------------------------------------------
TextCorpus load_text_corpus(const std::filesystem::path& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  if (bytes.empty())
    throw FileError(
        fmt::format("text corpus '{}' is empty; give a file with some text", path.string()));
  return TextCorpus(std::move(bytes), fmt::format("file '{}'", path.string()));
}

std::filesystem::path default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::filesystem::path(xdg) / "pipetrain";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::filesystem::path(home) / ".cache" / "pipetrain";
  return std::filesystem::temp_directory_path() / "pipetrain-cache";
}

TextCorpus bible_corpus(const std::filesystem::path& cache_dir, const std::string& program,
                        double timeout_seconds) {
  const std::filesystem::path cached = cache_dir / kBibleCacheName;
  if (auto bytes = read_verified_cache(cached)) return TextCorpus(std::move(*bytes), "bible-kjv");
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
  return TextCorpus(std::move(bytes), "bible-kjv");
}

}  // namespace pt
