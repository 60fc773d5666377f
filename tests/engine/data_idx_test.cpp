// IDX reader on small generated files: plain and gzipped, good and damaged.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/data/idx.h"
#include "temp_dir.h"

using namespace pt;
namespace fs = std::filesystem;

namespace {

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("pipetrain-idx") {}
};

// Header (magic 00 00 type ndims, big-endian dims) followed by `data`.
std::string idx_bytes(const std::vector<uint32_t>& dims, const std::string& data,
                      uint8_t type = 0x08) {
  std::string s = {'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8)
      s.push_back(static_cast<char>((d >> shift) & 0xFF));
  return s + data;
}

std::string counting(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 7 % 256);
  return s;
}

void write_plain(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void write_gz(const fs::path& p, const std::string& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!bytes.empty())
    REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
            static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

std::string read_error(const fs::path& p) {
  try {
    read_idx(p);
  } catch (const FileError& e) {
    const std::string msg = e.what();
    CHECK(msg.find(p.string()) != std::string::npos);
    return msg;
  }
  FAIL("expected FileError");
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("read_idx reads plain and gzipped files") {
  TempDir dir;
  const std::string data = counting(2 * 3 * 4);
  const std::string bytes = idx_bytes({2, 3, 4}, data);
  for (bool gz : {false, true}) {
    CAPTURE(gz);
    const fs::path p = dir.path / (gz ? "a.idx.gz" : "a.idx");
    gz ? write_gz(p, bytes) : write_plain(p, bytes);
    const IdxArray a = read_idx(p);
    CHECK(a.dims == std::vector<int64_t>{2, 3, 4});
    REQUIRE(a.data.size() == 24);
    for (size_t i = 0; i < 24; ++i) CHECK(a.data[i] == static_cast<uint8_t>(data[i]));
  }
  // 1-D (labels) and large enough to span several internal read chunks once gzipped.
  const std::string big = counting(5'000'000);
  write_gz(dir.path / "big.gz", idx_bytes({5'000'000}, big));
  const IdxArray b = read_idx(dir.path / "big.gz");
  CHECK(b.dims == std::vector<int64_t>{5'000'000});
  CHECK(b.data.size() == big.size());
  CHECK(b.data.back() == static_cast<uint8_t>(big.back()));
}

TEST_CASE("read_idx rejects truncated files with the byte counts") {
  TempDir dir;
  const std::string bytes = idx_bytes({10, 100}, counting(1000));
  for (bool gz : {false, true}) {
    CAPTURE(gz);
    const fs::path p = dir.path / (gz ? "t.gz" : "t");
    auto write = [&](const std::string& b) { gz ? write_gz(p, b) : write_plain(p, b); };
    write(bytes.substr(0, bytes.size() - 600));
    CHECK(contains(read_error(p), "expected 1000 bytes of data, found 400: the file is truncated"));
    write(bytes.substr(0, 12));  // header only
    CHECK(contains(read_error(p), "expected 1000 bytes of data, found 0"));
    write(bytes.substr(0, 6));
    CHECK(contains(read_error(p), "ends inside the IDX header (dimension 1 of 2)"));
    write("");
    CHECK(contains(read_error(p), "ends inside the 4-byte IDX magic"));
  }
  // A gzip stream cut short (as by an interrupted download) is truncation too, not garbage.
  const fs::path whole = dir.path / "whole.gz";
  write_gz(whole, idx_bytes({100000}, counting(100000)));
  std::ifstream in(whole, std::ios::binary);
  const std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_plain(dir.path / "cut.gz", gz.substr(0, gz.size() / 2));
  const std::string msg = read_error(dir.path / "cut.gz");
  CHECK(contains(msg, "expected 100000 bytes of data, found"));
  CHECK(contains(msg, "the file is truncated"));
}

// The IDX fuzz target's slowest inputs: a few bytes whose header claims up to the 2^40-element
// limit. Refused as truncated after reading what there is, plain and gzipped, and a file larger
// than one chunk of the reader (64 KiB, doubling) still loads whole.
TEST_CASE("read_idx: a short file claiming a huge array is refused as truncated; chunks add up") {
  TempDir dir;
  const fs::path p = dir.path / "huge.idx";
  write_plain(p, idx_bytes({1u << 20, 1u << 20}, counting(10)));
  CHECK(contains(read_error(p), "expected 1099511627776 bytes of data, found 10"));
  write_gz(p, idx_bytes({1u << 20, 1u << 20}, counting(10)));
  CHECK(contains(read_error(p), "expected 1099511627776 bytes of data, found 10"));
  const std::string data = counting(3 * 65541);  // 3 chunks: 64 KiB, 128 KiB, the rest
  write_gz(p, idx_bytes({3, 65541, 1}, data));
  const IdxArray a = read_idx(p);
  CHECK(a.dims == std::vector<int64_t>{3, 65541, 1});
  CHECK(std::string(a.data.begin(), a.data.end()) == data);
}

TEST_CASE("read_idx rejects wrong magic, other element types, trailing garbage, missing files") {
  TempDir dir;
  const fs::path p = dir.path / "x";
  write_plain(p, "\x01\x02\x08\x01" + std::string(8, '\0'));
  CHECK(contains(read_error(p), "not an IDX file: magic bytes are 01 02 08 01"));
  write_plain(p, idx_bytes({2}, std::string(8, '\0'), 0x0D));
  CHECK(contains(read_error(p), "IDX element type 0x0d (float32) is not supported; only 0x08"));
  write_plain(p, idx_bytes({}, ""));
  CHECK(contains(read_error(p), "declares 0 dimensions"));
  write_plain(p, idx_bytes({65535, 65535, 65535}, ""));
  CHECK(contains(read_error(p), "implausibly large"));
  write_gz(p, idx_bytes({4}, "abcdXYZ"));
  CHECK(contains(read_error(p), "expected 4 bytes of data, found 3 more after them"));
  write_gz(p, idx_bytes({0, 5}, ""));  // empty arrays are fine
  CHECK(read_idx(p).data.empty());
  CHECK(contains(read_error(dir.path / "missing.gz"), "cannot open: No such file or directory"));
}

TEST_CASE("read_idx refuses a FIFO, a device and a folder before opening them (no hang)") {
  TempDir dir;
  const fs::path fifo = dir.path / "train-images-idx3-ubyte.gz";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(contains(read_error(fifo), "it is a FIFO (named pipe), not a regular file"));
  CHECK(contains(read_error("/dev/zero"), "it is a device or socket, not a regular file"));
  CHECK(contains(read_error(dir.path), "it is a folder, not a regular file"));
}
