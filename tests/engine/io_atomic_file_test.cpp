// AtomicFileWriter: the target holds the old bytes or the new ones, never a mix, and no
// temporary file survives a failed or abandoned write.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "temp_dir.h"

using namespace pt;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the system temp dir, removed with everything in it.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("pipetrain-atomic") {}
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    return out;
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s)); }

}  // namespace

TEST_CASE("write_file_atomically creates and replaces a file, leaving nothing else") {
  TempDir dir;
  const fs::path target = dir.path / "out.bin";
  write_file_atomically(target, bytes_of("first version"));
  CHECK(slurp(target) == "first version");
  write_file_atomically(target, bytes_of("v2"));
  CHECK(slurp(target) == "v2");
  write_file_atomically(target, {});
  CHECK(fs::file_size(target) == 0);
  CHECK(dir.names() == std::vector<std::string>{"out.bin"});
}

TEST_CASE("AtomicFileWriter replaces the old file only on commit") {
  TempDir dir;
  const fs::path target = dir.path / "model.safetensors";
  write_file_atomically(target, bytes_of("old"));

  AtomicFileWriter w(target);
  CHECK(w.temp_path().parent_path() == dir.path);
  CHECK(w.temp_path().filename().string().rfind(".model.safetensors.tmp.", 0) == 0);
  w.write(bytes_of("new "));
  w.write(bytes_of("contents"));
  CHECK(w.bytes_written() == 12);
  CHECK(slurp(target) == "old");  // not yet
  CHECK(fs::exists(w.temp_path()));
  w.commit();
  CHECK(slurp(target) == "new contents");
  CHECK_FALSE(fs::exists(w.temp_path()));
  CHECK(dir.names() == std::vector<std::string>{"model.safetensors"});
  CHECK_THROWS_AS(w.write(bytes_of("more")), UsageError);
  CHECK_THROWS_AS(w.commit(), UsageError);
}

TEST_CASE("AtomicFileWriter abandoned without commit removes its temporary file") {
  TempDir dir;
  const fs::path target = dir.path / "ckpt.bin";
  write_file_atomically(target, bytes_of("keep me"));
  fs::path temp;
  {
    AtomicFileWriter w(target);
    temp = w.temp_path();
    w.write(bytes_of("half a chec"));
    CHECK(fs::exists(temp));
  }  // e.g. an exception while serialising
  CHECK_FALSE(fs::exists(temp));
  CHECK(slurp(target) == "keep me");
  CHECK(dir.names() == std::vector<std::string>{"ckpt.bin"});

  {  // the same for a target that never existed
    AtomicFileWriter w(dir.path / "fresh.bin");
    w.write(bytes_of("x"));
  }
  CHECK(dir.names() == std::vector<std::string>{"ckpt.bin"});
}

TEST_CASE("AtomicFileWriter refuses a bad target before writing and leaves no temporary file") {
  TempDir dir;
  SUBCASE("a file where a folder above it should be") {
    std::ofstream(dir.path / "plain") << "x";
    const fs::path target = dir.path / "plain" / "sub" / "x.bin";
    try {
      AtomicFileWriter w(target);
      FAIL("expected UsageError");
    } catch (const UsageError& e) {
      const std::string msg = e.what();
      CHECK(msg.find(target.string()) != std::string::npos);
      CHECK(msg.find("is a regular file, not a folder") != std::string::npos);
    }
    CHECK(dir.names() == std::vector<std::string>{"plain"});
  }
  SUBCASE("the target is a directory") {
    const fs::path target = dir.path / "taken";
    fs::create_directory(target);
    try {
      AtomicFileWriter w(target);
      FAIL("expected UsageError");
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()).find(target.string()) != std::string::npos);
      CHECK(std::string(e.what()).find("is a folder") != std::string::npos);
    }
    CHECK(fs::is_directory(target));
    CHECK(dir.names() == std::vector<std::string>{"taken"});
  }
  SUBCASE("a FIFO that appears at the target before commit is not replaced") {
    const fs::path target = dir.path / "late";
    {
      AtomicFileWriter w(target);
      w.write(bytes_of("data"));
      REQUIRE(::mkfifo(target.c_str(), 0600) == 0);
      try {
        w.commit();
        FAIL("expected UsageError");
      } catch (const UsageError& e) {
        CHECK(std::string(e.what()).find("FIFO") != std::string::npos);
      }
    }
    CHECK(fs::is_fifo(target));
    CHECK(dir.names() == std::vector<std::string>{"late"});
  }
  SUBCASE("a path without a file name") {
    CHECK_THROWS_AS(AtomicFileWriter(dir.path / ""), UsageError);
  }
}

TEST_CASE("write_file_atomically works with a bare relative file name") {
  TempDir dir;
  const fs::path old = fs::current_path();
  fs::current_path(dir.path);
  write_file_atomically("relative.bin", bytes_of("abc"));
  fs::current_path(old);
  CHECK(slurp(dir.path / "relative.bin") == "abc");
}

TEST_CASE("AtomicFileWriter creates the missing folders above its target") {
  TempDir dir;
  const fs::path target = dir.path / "a" / "b" / "x.bin";
  write_file_atomically(target, bytes_of("hello"));
  CHECK(fs::is_regular_file(target));
  CHECK(fs::file_size(target) == 5);
}
