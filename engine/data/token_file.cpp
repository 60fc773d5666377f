#include "engine/data/token_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/data/text_corpus.h"

namespace pt {

namespace {

// llm.c's Llama 3 files: the same header with uint32 tokens (version 7). Recognised so that
// --data-format auto sends them to the llm.c reader, which refuses them by name, instead of
// reading their header as raw tokens.
constexpr int32_t kLlmcUint32Magic = 20240801;

[[noreturn]] void bad_file(const std::filesystem::path& path, std::string_view what) {
  throw FileError(fmt::format("token file '{}': {}", path.string(), what));
}

// An open file descriptor, closed when it goes.
struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens a regular file for reading and returns its size. O_NONBLOCK: opening a FIFO would
// otherwise wait for a writer (forever, for a mistake); fstat then refuses it, a folder or a
// device, which never end. On a regular file O_NONBLOCK changes nothing.
int64_t open_regular(const std::filesystem::path& path, Fd& file) {
  file.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (file.fd < 0)
    bad_file(path,
             fmt::format("cannot open it: {}; give an existing token file", std::strerror(errno)));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0)
    bad_file(path, fmt::format("cannot read it: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    bad_file(path, fmt::format("it is {}, not a regular file; give a token file",
                               S_ISDIR(st.st_mode)    ? "a folder"
                               : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                                                      : "a device or socket"));
  return static_cast<int64_t>(st.st_size);
}

// Reads exactly `bytes` bytes at the file's position into `out` (read() may return less than
// asked for, above 2 GiB always does).
void read_exactly(int fd, const std::filesystem::path& path, void* out, int64_t bytes) {
  auto* p = static_cast<char*>(out);
  for (int64_t done = 0; done < bytes;) {
    const ssize_t n = ::read(fd, p + done, static_cast<size_t>(bytes - done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) bad_file(path, fmt::format("cannot read it: {}", std::strerror(errno)));
    if (n == 0)
      bad_file(path, fmt::format("it ended after {} of {} bytes while being read (did it "
                                 "shrink?)",
                                 done, bytes));
    done += n;
  }
}

// The tokens are little-endian on disk; a big-endian host swaps them in place.
void from_little_endian(std::vector<uint16_t>& tokens) {
  if constexpr (std::endian::native == std::endian::big)
    for (uint16_t& t : tokens) t = static_cast<uint16_t>((t >> 8) | (t << 8));
}

int32_t little_endian_i32(const unsigned char* p) {
  return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                              static_cast<uint32_t>(p[2]) << 16 |
                              static_cast<uint32_t>(p[3]) << 24);
}

// `count` uint16 tokens from the file's position, in one read.
std::vector<uint16_t> read_tokens(int fd, const std::filesystem::path& path, int64_t count) {
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  read_exactly(fd, path, tokens.data(), count * 2);
  from_little_endian(tokens);
  return tokens;
}

}  // namespace

DataFormat parse_data_format(std::string_view name) {
  for (DataFormat f :
       {DataFormat::automatic, DataFormat::text, DataFormat::llmc, DataFormat::uint16})
    if (name == data_format_name(f)) return f;
  throw UsageError(fmt::format(
      "unknown data format '{}': use auto (the default: llm.c's header when the file starts with "
      "its magic, else uint16 for a name ending in .bin, else text), text, llmc or uint16",
      name));
}

std::string_view data_format_name(DataFormat format) {
  switch (format) {
    case DataFormat::automatic: return "auto";
    case DataFormat::text: return "text";
    case DataFormat::llmc: return "llmc";
    case DataFormat::uint16: return "uint16";
  }
  return "?";
}

DataFormat detect_data_format(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    std::array<unsigned char, 4> head{};
    std::ifstream in(path, std::ios::binary);
    if (in.read(reinterpret_cast<char*>(head.data()), head.size())) {
      const int32_t magic = little_endian_i32(head.data());
      if (magic == kLlmcMagic || magic == kLlmcUint32Magic) return DataFormat::llmc;
    }
  }
  return path.extension() == ".bin" ? DataFormat::uint16 : DataFormat::text;
}

TokenCorpus load_llmc_file(const std::filesystem::path& path, int64_t vocab) {
  Fd file;
  const int64_t size = open_regular(path, file);
  if (size == 0) bad_file(path, "it is empty; give an llm.c token file");
  if (size < kLlmcHeaderBytes)
    bad_file(path, fmt::format("it has {} bytes, too few for llm.c's header of {} (256 int32); "
                               "it is truncated or not an llm.c token file",
                               size, kLlmcHeaderBytes));
  std::array<unsigned char, kLlmcHeaderBytes> header{};
  read_exactly(file.fd, path, header.data(), kLlmcHeaderBytes);
  const int32_t magic = little_endian_i32(&header[0]);
  const int32_t version = little_endian_i32(&header[4]);
  const int32_t count = little_endian_i32(&header[8]);
  if (magic == kLlmcUint32Magic)
    bad_file(path, fmt::format("its magic {} is llm.c's for uint32 tokens (Llama 3, version {}); "
                               "only its GPT-2 files (magic {}, uint16 tokens) are read",
                               magic, version, kLlmcMagic));
  if (magic != kLlmcMagic)
    bad_file(path, fmt::format("its first int32 is {}, not llm.c's magic {}: not an llm.c token "
                               "file; if it holds raw uint16 tokens (nanoGPT's .bin), pass "
                               "--data-format uint16",
                               magic, kLlmcMagic));
  if (version != kLlmcVersion)
    bad_file(path, fmt::format("llm.c header version {}; only version {} (uint16 tokens) is read",
                               version, kLlmcVersion));
  if (count <= 0)
    bad_file(path, fmt::format("its header counts {} tokens; a token file needs at least one "
                               "(it was written empty or the header is damaged)",
                               count));
  const int64_t expected = kLlmcHeaderBytes + int64_t{count} * 2;
  if (size != expected)
    bad_file(path,
             fmt::format("its header counts {} tokens ({} bytes with the header) but the file has "
                         "{} bytes: {}; write it again",
                         count, expected, size,
                         size < expected ? "it is truncated" : "bytes follow its tokens"));
  return TokenCorpus(read_tokens(file.fd, path, count), vocab,
                     fmt::format("llm.c token file '{}'", path.string()));
}

TokenCorpus load_uint16_file(const std::filesystem::path& path, int64_t vocab) {
  Fd file;
  const int64_t size = open_regular(path, file);
  if (size == 0) bad_file(path, "it is empty; give a file of uint16 tokens");
  if (size % 2 != 0)
    bad_file(path, fmt::format("it has {} bytes, an odd number: not whole uint16 tokens (a "
                               "truncated file, or one of another format; text needs "
                               "--data-format text)",
                               size));
  return TokenCorpus(read_tokens(file.fd, path, size / 2), vocab,
                     fmt::format("uint16 token file '{}'", path.string()));
}

int64_t data_vocab(const std::filesystem::path& path, DataFormat format,
                   std::optional<int64_t> vocab) {
  switch (format) {
    case DataFormat::text:
      if (vocab)
        throw UsageError(fmt::format(
            "--vocab {} applies to token files, but '{}' is read as byte-level text (vocab 256); "
            "drop --vocab, or pass --data-format llmc or uint16 if it holds tokens",
            *vocab, path.string()));
      return kByteVocab;
    case DataFormat::llmc: return vocab.value_or(kGpt2Vocab);
    case DataFormat::uint16:
      if (!vocab)
        throw UsageError(fmt::format(
            "'{}' is read as raw uint16 tokens, which do not say their vocabulary: pass --vocab "
            "(50257 for GPT-2's tokenizer; nanoGPT's meta.pkl holds it for its own)",
            path.string()));
      return *vocab;
    case DataFormat::automatic: break;
  }
  throw UsageError("data_vocab: the data format must be detected first");
}

TokenCorpus load_corpus(const std::filesystem::path& path, DataFormat format,
                        std::optional<int64_t> vocab) {
  if (format == DataFormat::automatic) format = detect_data_format(path);
  const int64_t v = data_vocab(path, format, vocab);
  switch (format) {
    case DataFormat::text: return load_text_corpus(path);
    case DataFormat::llmc: return load_llmc_file(path, v);
    case DataFormat::uint16: return load_uint16_file(path, v);
    case DataFormat::automatic: break;
  }
  throw UsageError("load_corpus: no data format");  // unreachable: detect never says automatic
}

}  // namespace pt
