#include "engine/data/idx.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <system_error>

#include "engine/core/error.h"

namespace pt {
namespace {

constexpr uint8_t kTypeUbyte = 0x08;
// Above this a header is corrupt, not a dataset (2^40 bytes = 1 TiB).
constexpr uint64_t kMaxElements = uint64_t{1} << 40;

[[noreturn]] void bad_file(const std::filesystem::path& path, const std::string& what) {
  throw FileError(fmt::format("{}: {}", path.string(), what));
}

const char* type_name(uint8_t type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "unknown";
  }
}

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to n bytes; returns how many came (fewer only at the end of the data). A corrupt
// gzip stream throws; a gzip stream cut short counts as the end (the caller reports truncation).
size_t read_some(gzFile f, const std::filesystem::path& path, void* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, size_t{1} << 30));
    const int r = gzread(f, static_cast<char*>(dst) + got, chunk);
    if (r < 0) {
      int code = Z_OK;
      const char* msg = gzerror(f, &code);
      if (code == Z_BUF_ERROR) break;  // "unexpected end of file": a truncated .gz
      if (code == Z_ERRNO) {
        const int err = errno;
        bad_file(path, fmt::format("reading failed: {}", std::generic_category().message(err)));
      }
      bad_file(path, fmt::format("the gzip data is corrupt ({})", msg));
    }
    if (r == 0) {
      int code = Z_OK;
      const char* msg = gzerror(f, &code);
      if (code != Z_OK && code != Z_BUF_ERROR)
        bad_file(path, fmt::format("the gzip data is corrupt ({})", msg));
      break;
    }
    got += static_cast<size_t>(r);
  }
  return got;
}

}  // namespace

IdxArray read_idx(const std::filesystem::path& path) {
  // Opening a FIFO blocks until a writer comes (forever, for a mistake) and a device such as
  // /dev/zero never ends: only a regular file (or a link to one) is read. A missing file is left
  // to the open's message.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    bad_file(path, fmt::format("it is {}, not a regular file; give the IDX file (.gz or plain)",
                               std::filesystem::is_directory(st) ? "a folder"
                               : std::filesystem::is_fifo(st)    ? "a FIFO (named pipe)"
                                                                 : "a device or socket"));
  GzPtr f(gzopen(path.c_str(), "rb"));
  if (!f) {
    const int err = errno;
    bad_file(path, fmt::format("cannot open: {}", std::generic_category().message(err)));
  }

  gzbuffer(f.get(), 1u << 17);  // fewer, larger reads than the 8 KiB default

  // -- magic and dimensions
  uint8_t magic[4];
  if (read_some(f.get(), path, magic, 4) != 4)
    bad_file(path, "the file ends inside the 4-byte IDX magic: it is empty or truncated");
  if (magic[0] != 0 || magic[1] != 0)
    bad_file(path, fmt::format("not an IDX file: magic bytes are {:02x} {:02x} {:02x} {:02x}, "
                               "expected 00 00 TYPE NDIMS",
                               magic[0], magic[1], magic[2], magic[3]));
  if (magic[2] != kTypeUbyte)
    bad_file(path, fmt::format("IDX element type 0x{:02x} ({}) is not supported; only 0x08 "
                               "(unsigned byte) is",
                               magic[2], type_name(magic[2])));
  const int ndims = magic[3];
  if (ndims == 0) bad_file(path, "the IDX header declares 0 dimensions");

  IdxArray out;
  uint64_t elements = 1;
  for (int i = 0; i < ndims; ++i) {
    uint8_t b[4];
    if (read_some(f.get(), path, b, 4) != 4)
      bad_file(path, fmt::format("the file ends inside the IDX header (dimension {} of {}): it "
                                 "is truncated",
                                 i + 1, ndims));
    const uint64_t d =
        (uint64_t{b[0]} << 24) | (uint64_t{b[1]} << 16) | (uint64_t{b[2]} << 8) | b[3];
    elements *= d;  // at most 2^32 per factor; checked against the limit after each step
    if (elements > kMaxElements)
      bad_file(path, fmt::format("the IDX dimensions are implausibly large (over {} elements): "
                                 "the header is corrupt",
                                 kMaxElements));
    out.dims.push_back(static_cast<int64_t>(d));
  }

  // -- data: grown as it arrives, so a corrupt header cannot make us allocate a terabyte. The
  //    chunks double from 64 KiB to 4 MiB: a short file whose header claims much more costs what
  //    the file holds, not a 256 MiB reservation and a 4 MiB zero-fill (the IDX fuzz target ran
  //    at 100 inputs/s because of them; the vector's own doubling keeps large files linear).
  constexpr size_t kMaxChunk = size_t{1} << 22;
  size_t chunk = size_t{1} << 16;
  while (out.data.size() < elements) {
    const size_t old = out.data.size();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk, elements - old));
    out.data.resize(old + want);
    const size_t got = read_some(f.get(), path, out.data.data() + old, want);
    out.data.resize(old + got);
    if (got < want)
      bad_file(path, fmt::format("expected {} bytes of data, found {}: the file is truncated",
                                 elements, out.data.size()));
    chunk = std::min(2 * chunk, kMaxChunk);
  }
  uint8_t extra[4096];
  if (const size_t more = read_some(f.get(), path, extra, sizeof(extra)); more > 0)
    bad_file(path, fmt::format("expected {} bytes of data, found {}{} more after them: the file "
                               "has trailing garbage or a wrong header",
                               elements, more, more == sizeof(extra) ? "+" : ""));
  return out;
}

}  // namespace pt
