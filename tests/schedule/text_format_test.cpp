// The text format: round trips, comments, placements, and parse errors that name the line.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/text_format.h"
#include "tests/schedule/sweep.h"

using namespace pt::sched;

namespace {

std::string parse_error(const std::string& text) {
  try {
    parse_schedule_text(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(parsed)";
}

// A file under the system temp folder, removed at scope exit.
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& name, const std::string& text)
      : path(std::filesystem::temp_directory_path() /
             ("pipetrain_sched_" + std::to_string(::getpid()) + "_" + name)) {
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

}  // namespace

TEST_CASE("text round trip of every generated schedule, compute-only and lowered") {
  for (const auto& g : test::sweep_schedules()) {
    CAPTURE(g.label());
    for (const Schedule& s : {g.schedule, add_grad_reduction(add_communication(g.schedule))}) {
      const std::string text = to_text(s);
      CHECK(parse_schedule_text(text) == s);
      CHECK(to_text(parse_schedule_text(text)) == text);
    }
  }
}

TEST_CASE("text format: the documented example, comments, blank lines, placement") {
  const std::string text =
      "# 1F1B, 2 devices, 3 micro-batches\n"
      "\n"
      "pipeline devices=2 stages=2 microbatches=3   # the shape\n"
      "device 1: 1F0 1B0 1F1 1B1 1F2 1B2\n"
      "   # device 0 may come second\n"
      "device 0: 0F0 0F1 0B0 0F2 0B1 0B2\n";
  const Schedule s = parse_schedule_text(text);
  CHECK(s == one_f_one_b(2, 3));
  CHECK(to_text(s) ==
        "pipeline devices=2 stages=2 microbatches=3\n"
        "device 0: 0F0 0F1 0B0 0F2 0B1 0B2\n"
        "device 1: 1F0 1B0 1F1 1B1 1F2 1B2\n");

  Schedule placed = empty_schedule(2, 3, 1);
  placed.stage_device = {0, 0, 1};
  placed.actions[0] = {
      {0, ActionType::F, 0}, {1, ActionType::F, 0}, {1, ActionType::B, 0}, {0, ActionType::B, 0}};
  placed.actions[1] = {{2, ActionType::F, 0}, {2, ActionType::B, 0}};
  const std::string placed_text = to_text(placed);
  CHECK(placed_text.find("placement 0 0 1\n") != std::string::npos);
  CHECK(parse_schedule_text(placed_text) == placed);
  // "device 0 :" with a detached colon, and an empty list, also parse.
  const Schedule spaced = parse_schedule_text(
      "pipeline devices=2 stages=2 microbatches=1\ndevice 0 : 0F0\ndevice 1:\n");
  CHECK(spaced.actions[0].size() == 1);
  CHECK(spaced.actions[1].empty());
}

TEST_CASE("text format: parse errors carry the line number and the fix") {
  const std::string header = "pipeline devices=2 stages=2 microbatches=2\n";
  struct Case {
    std::string text, expect;
  };
  const Case cases[] = {
      {"", "no 'pipeline devices=D stages=S microbatches=M' line"},
      {"# only a comment\n", "no 'pipeline"},
      {"device 0: 0F0\n", "line 1: expected 'pipeline devices=D"},
      {"\n\npipeline devices=2 stages=2\n", "line 3: the header is"},
      {"pipeline devices=0 stages=2 microbatches=2\n", "line 1: expected devices=N with N >= 1"},
      {"pipeline stages=2 devices=2 microbatches=2\n", "line 1: expected devices=N"},
      {"pipeline devices=2 stages=x microbatches=2\n", "found 'stages=x'"},
      {header + header, "line 2: a second 'pipeline' line"},
      {header + "device 0: 0F0 0F1\ndevice 1: 1F0 2X0 1B0\n",
       "line 3: '2X0' (device 1, step 1) is not an action"},
      {header + "device 0: 0F0\n\n# c\ndevice 1: F0\n", "line 5: 'F0'"},
      {header + "device 2: 0F0\n", "line 2: device '2' is not in 0..1"},
      {header + "device x: 0F0\n", "line 2: device 'x' is not in 0..1"},
      {header + "device 0 0F0\n", "line 2: expected 'device N: actions...'"},
      {header + "device 0: 0F0\ndevice 0: 0B0\n", "line 3: a second line for device 0"},
      {header + "device 0: 0F0\n", "no line for device 1"},
      {header + "placement 0\n", "line 2: placement lists 1 devices for 2 stages"},
      {header + "placement 0 5\n", "line 2: placement of stage 1 is '5'"},
      {header + "device 0: 0F0\nplacement 0 1\n", "line 3: 'placement' must come before"},
      {header + "placement 0 1\nplacement 0 1\n", "line 3: a second 'placement' line"},
      {header + "stage 0: 0F0\n", "line 2: unknown line starting with 'stage'"},
      // Sizes are bounded before anything is allocated (these ended in bad_alloc).
      {"pipeline devices=2000000000 stages=2 microbatches=2\n",
       "line 1: header field devices=2000000000 exceeds the limit of 65536"},
      {"pipeline devices=1 stages=1 microbatches=2147483647\n",
       "microbatches=2147483647 exceeds the limit of 1048576"},
      {"pipeline devices=4 stages=65536 microbatches=1048576\n",
       "stages x microbatches = 68719476736 exceeds the limit of 16777216"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    const std::string msg = parse_error(c.text);
    CHECK_MESSAGE(msg.find(c.expect) != std::string::npos, msg);
    CHECK(msg.starts_with("schedule text"));
  }
}

TEST_CASE("read_schedule_file: parses, validates, names the file") {
  const TempFile good("good.txt", to_text(zb_h1(2, 3)));
  CHECK(read_schedule_file(good.path.string()) == zb_h1(2, 3));

  const TempFile syntax("syntax.txt",
                        "pipeline devices=1 stages=1 microbatches=1\ndevice 0: 0F0 0Q0\n");
  try {
    read_schedule_file(syntax.path.string());
    FAIL("expected a parse error");
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    CHECK(msg.find(syntax.path.string() + ", line 2:") != std::string::npos);
  }

  // Parses, but device 1 runs micro-batch 1 before 0 while device 0 runs 0 then 1: deadlock.
  const TempFile stuck("stuck.txt",
                       "pipeline devices=2 stages=2 microbatches=2\n"
                       "device 0: 0F0 0B0 0F1 0B1\n"
                       "device 1: 1F1 1F0 1B0 1B1\n");
  try {
    read_schedule_file(stuck.path.string());
    FAIL("expected a validation error");
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    CHECK(msg.starts_with(stuck.path.string()));
    CHECK(msg.find("deadlock") != std::string::npos);
    CHECK(msg.find("<-- ERROR HERE") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(read_schedule_file("/nonexistent/pipetrain.txt"),
                       doctest::Contains("cannot open schedule file"), std::invalid_argument);

  // A file too large to be a schedule is refused before it is read (a sparse file: no disk used).
  const TempFile huge("huge.txt", "pipeline devices=1 stages=1 microbatches=1\n");
  std::filesystem::resize_file(huge.path, (uintmax_t{1} << 30) + 1);
  CHECK_THROWS_WITH_AS(read_schedule_file(huge.path.string()),
                       doctest::Contains("it has 1073741825 bytes, more than the limit of"),
                       std::invalid_argument);
}

TEST_CASE("read_schedule_file: a FIFO or a folder is refused before it is opened (no hang)") {
  const std::filesystem::path fifo = std::filesystem::temp_directory_path() /
                                     ("pipetrain_sched_" + std::to_string(::getpid()) + "_fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(read_schedule_file(fifo.string()),
                       doctest::Contains("it is a FIFO (named pipe), not a regular file"),
                       std::invalid_argument);
  std::filesystem::remove(fifo);
  CHECK_THROWS_WITH_AS(read_schedule_file(std::filesystem::temp_directory_path().string()),
                       doctest::Contains("it is a folder"), std::invalid_argument);
}

TEST_CASE("generate(\"file:PATH\"): a hand-written compute-only schedule for this D and M") {
  const TempFile file("hand.txt",
                      "# a 1F1B written by hand\n"
                      "pipeline devices=2 stages=2 microbatches=2\n"
                      "device 0: 0F0 0F1 0B0 0B1\n"
                      "device 1: 1F0 1B0 1F1 1B1\n");
  CHECK(generate("file:" + file.path.string(), 2, 2) == one_f_one_b(2, 2));
  CHECK_THROWS_WITH_AS(generate("file:" + file.path.string(), 3, 2),
                       doctest::Contains("but this run has devices=3 microbatches=2"),
                       std::invalid_argument);
  const TempFile lowered("lowered.txt", to_text(add_communication(one_f_one_b(2, 2))));
  CHECK_THROWS_WITH_AS(generate("file:" + lowered.path.string(), 2, 2),
                       doctest::Contains("write compute actions only"), std::invalid_argument);
}
