// Fuzz target: pipetrain-plan's command line (examples/plan/flags.h), as main() parses and checks
// it before any work, without planning. The input is the argument words
// (tests/fuzz/command_line.h). Every command line must be accepted, or refused by CLI11
// (CLI::ParseError: unknown flags, values of the wrong type, --help) or by the checks
// (pt::UsageError). Checks read no file: nothing is written.
#include <cstddef>
#include <cstdint>

#include <CLI/CLI.hpp>

#include "engine/core/error.h"
#include "examples/plan/flags.h"
#include "tests/fuzz/command_line.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// Registering the flags is most of the time of one input: it is done once, and each input parses
// into fresh defaults (CLI::App::clear() forgets the previous parse).
struct Parser {
  pt::examples::PlanFlags f;
  CLI::App app{"pipetrain-plan"};
  Parser() { pt::examples::add_plan_flags(app, f); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Parser parser;
  pt::examples::PlanFlags& f = parser.f;
  f = {};
  parser.app.clear();
  pt::fuzz::CommandLine line("pipetrain-plan", data, size);
  try {
    parser.app.parse(line.argc(), line.argv.data());
  } catch (const CLI::ParseError&) {
    return 0;  // main() prints it and exits (CLI11_PARSE)
  }
  pt::fuzz::load_or_refuse<pt::UsageError>([&] { (void)pt::examples::check_plan_flags(f); });
  return 0;
}
