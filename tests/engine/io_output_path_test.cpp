// check_output_path: every output flag's path is checked before any work. Absent files and
// regular files (or links to one) pass, in a writable folder or under missing folders that
// prepare_output_path creates; an empty path, a folder, a FIFO, a device, a link to one or a
// dangling link is refused with a message naming the flag, the path, what is wrong and what would
// fix it.
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
  SUBCASE("missing folders above it, which prepare_output_path creates") {
    const fs::path deep = dir.path / "a" / "b" / "m.jsonl";
    CHECK_NOTHROW(check_output_path(deep, "--metrics"));
    CHECK_FALSE(fs::exists(dir.path / "a"));  // the check only looks
    prepare_output_path(deep, "--metrics");
    CHECK(fs::is_directory(dir.path / "a" / "b"));
    CHECK_FALSE(fs::exists(deep));  // the writer makes the file itself
  }
}

TEST_CASE("output folders (--flight-recorder, --save): created when missing, else a folder") {
  test::TempDir dir("pipetrain-outpath");
  const fs::path fr = dir.path / "x" / "fr";
  CHECK_NOTHROW(check_output_path(fr, "--flight-recorder", OutputKind::folder));
  prepare_output_path(fr, "--flight-recorder", OutputKind::folder);
  CHECK(fs::is_directory(fr));
  CHECK_NOTHROW(prepare_output_path(fr, "--flight-recorder", OutputKind::folder));  // again
  std::ofstream(dir.path / "file") << "x";
  try {
    check_output_path(dir.path / "file", "--flight-recorder", OutputKind::folder);
    FAIL("a regular file taken for a folder");
  } catch (const UsageError& e) {
    CHECK(contains(e.what(), "it is a regular file, not a folder"));
  }
  REQUIRE(::mkfifo((dir.path / "pipe").c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(check_output_path(dir.path / "pipe", "--save", OutputKind::folder),
                       doctest::Contains("it is a FIFO (named pipe), not a folder"), UsageError);
  // The checkpoint's own check keeps its rules and shares the parents' and the empty one's.
  CHECK_THROWS_WITH_AS(check_output_parents("", "--save"),
                       doctest::Contains("--save: the path is empty"), UsageError);
  fs::create_symlink("/dev/null", dir.path / "null-link");  // leads somewhere: not dangling
  CHECK_NOTHROW(check_output_parents(dir.path / "null-link", "--save"));
  fs::create_symlink(dir.path / "gone", dir.path / "dangling");
  CHECK_THROWS_WITH_AS(check_output_parents(dir.path / "dangling", "--save"),
                       doctest::Contains("which does not exist"), UsageError);
}

TEST_CASE("check_output_path refuses what a write would fail on or destroy") {
  test::TempDir dir("pipetrain-outpath");
  SUBCASE("an empty path (an unset shell variable)") {
    try {
      check_output_path("", "--metrics");
      FAIL("an empty path was accepted");
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()) ==
            "--metrics: the path is empty (an unset shell variable?); give a path, or leave "
            "--metrics out");
    }
  }
  SUBCASE("a dangling symbolic link: the write would replace the link") {
    fs::create_symlink(dir.path / "nowhere" / "t.json", dir.path / "dangling.json");
    CHECK(contains(refusal(dir.path / "dangling.json", "--trace"),
                   "is a symbolic link to " + (dir.path / "nowhere" / "t.json").string() +
                       ", which does not exist, and writing would replace the link"));
    CHECK(fs::is_symlink(dir.path / "dangling.json"));
    CHECK_THROWS_AS(prepare_output_path(dir.path / "dangling.json", "--trace"), UsageError);
    CHECK_FALSE(fs::exists(dir.path / "nowhere"));
  }
  SUBCASE("a dangling symbolic link as a folder above it") {
    fs::create_symlink(dir.path / "gone", dir.path / "dir-link");
    CHECK(contains(refusal(dir.path / "dir-link" / "sub" / "m.jsonl", "--metrics"),
                   "dir-link is a symbolic link to"));
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
    CHECK(contains(refusal(dir.path / "file" / "x"), "is a regular file, not a folder"));
    CHECK(
        contains(refusal(dir.path / "file" / "a" / "b" / "x"), "is a regular file, not a folder"));
  }
  SUBCASE("a folder that is not writable") {
    if (::geteuid() == 0) return;  // root writes anywhere
    fs::create_directory(dir.path / "ro");
    fs::permissions(dir.path / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    CHECK(contains(refusal(dir.path / "ro" / "x"), "cannot write in the folder"));
    fs::permissions(dir.path / "ro", fs::perms::owner_all);
  }
}
