// check_output_path: every output flag's path is checked before any work. Absent files and
// regular files (or links to one) in a writable folder pass; a missing folder, a folder, a
// FIFO, a device or a link to one is refused with a message naming the flag, the path, what is
// wrong and what would fix it.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/core/error.h"
#include "engine/io/output_path.h"
#include "temp_dir.h"

using namespace pt;
namespace fs = std::filesystem;

namespace {

// The message check_output_path throws for `path` (fails the test when it accepts the path).
std::string refusal(const fs::path& path, const std::string& what = "--save") {
  try {
    check_output_path(path, what);
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    CHECK(msg.find(what + " " + path.string() + ": ") == 0);  // the flag and the path first
    return msg;
  }
  FAIL("expected UsageError for " << path.string());
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("check_output_path accepts what can be written as a file") {
  test::TempDir dir("pipetrain-outpath");
  SUBCASE("an absent file in a writable folder") {
    CHECK_NOTHROW(check_output_path(dir.path / "new.safetensors", "--save"));
  }
  SUBCASE("an existing regular file") {
    std::ofstream(dir.path / "old.jsonl") << "{}\n";
    CHECK_NOTHROW(check_output_path(dir.path / "old.jsonl", "--metrics"));
  }
  SUBCASE("a symbolic link to a regular file") {
    std::ofstream(dir.path / "real.json") << "{}";
    fs::create_symlink(dir.path / "real.json", dir.path / "link.json");
    CHECK_NOTHROW(check_output_path(dir.path / "link.json", "--trace"));
  }
  SUBCASE("a bare file name (the current folder)") {
    const fs::path old = fs::current_path();
    fs::current_path(dir.path);
    CHECK_NOTHROW(check_output_path("plain.svg", "--timeline"));
    fs::current_path(old);
  }
  SUBCASE("an empty path is no output") { CHECK_NOTHROW(check_output_path("", "--save")); }
}

TEST_CASE("check_output_path refuses what a write would fail on or destroy") {
  test::TempDir dir("pipetrain-outpath");
  SUBCASE("a folder that does not exist") {
    const std::string msg = refusal("/nonexistent/x");
    CHECK(msg ==
          "--save /nonexistent/x: the folder /nonexistent does not exist; create it or "
          "choose another path");
  }
  SUBCASE("a folder where the file should be") {
    fs::create_directory(dir.path / "sub");
    const std::string msg = refusal(dir.path / "sub", "--trace");
    CHECK(contains(msg, "it is a folder, not a regular file"));
    CHECK(contains(msg, "choose the path of a regular file or of a new one"));
  }
  SUBCASE("a path ending in a slash") {
    CHECK(contains(refusal(dir.path / ""), "names a folder, not a file"));
  }
  SUBCASE("a FIFO") {
    REQUIRE(::mkfifo((dir.path / "pipe").c_str(), 0600) == 0);
    CHECK(contains(refusal(dir.path / "pipe", "--metrics"), "it is a FIFO (named pipe)"));
    CHECK(fs::is_fifo(dir.path / "pipe"));
  }
  SUBCASE("a symbolic link to a folder") {
    fs::create_directory(dir.path / "sub");
    fs::create_directory_symlink(dir.path / "sub", dir.path / "link");
    CHECK(contains(refusal(dir.path / "link", "--timeline"),
                   "it is a symbolic link to a folder, not a regular file"));
  }
  SUBCASE("a character device: /dev/null") {
    CHECK(contains(refusal("/dev/null"), "it is a character device, not a regular file"));
    struct stat st {};
    REQUIRE(::stat("/dev/null", &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
  }
  SUBCASE("a file where the folder should be") {
    std::ofstream(dir.path / "file") << "x";
    CHECK(contains(refusal(dir.path / "file" / "x"), "not a folder"));
  }
  SUBCASE("a folder that is not writable") {
    if (::geteuid() == 0) return;  // root writes anywhere
    fs::create_directory(dir.path / "ro");
    fs::permissions(dir.path / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    CHECK(contains(refusal(dir.path / "ro" / "x"), "cannot write in the folder"));
    fs::permissions(dir.path / "ro", fs::perms::owner_all);
  }
}
