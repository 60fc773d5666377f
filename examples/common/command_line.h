#pragma once
// What every example's command line shares beyond its flags: how a bad command line ends (one
// message, exit code 2, as every later usage error), text flags that must not be empty (an unset
// shell variable, `--save "$CKPT"`, must not silently mean "no checkpoint"), and the groups
// --help shows the flags in (Model, Data, Training, Parallelism, Schedule, Checkpoints,
// Diagnostics).
#include <initializer_list>
#include <string>

#include <CLI/CLI.hpp>

namespace pt::examples {

// Exit code for a bad command line or a usage error: 2, as in the programs' UsageError handlers.
inline constexpr int kExitUsage = 2;

// Parses argv into `app`. Returns -1 when the program should go on, otherwise the code to exit
// with: 0 after --help (printed), kExitUsage for a bad command line (CLI11's message printed on
// stderr) instead of CLI11's own codes (105 for a validator, 109 for an unknown flag ...).
inline int parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
}

// For text flags (paths, modes, lists): the value must not be empty. CLI11 prefixes the flag:
// "--save: the value is empty (an unset shell variable?); give one, or leave the flag out".
inline const CLI::Validator kNotEmpty(
    [](std::string& text) {
      return text.empty() ? std::string(
                                "the value is empty (an unset shell variable?); give one, or "
                                "leave the flag out")
                          : std::string();
    },
    "");

// Puts the named options in `group` for --help (they keep their order of registration). An
// unknown name throws CLI::OptionNotFound: a renamed flag cannot drop out of its group silently.
inline void set_group(CLI::App& app, const std::string& group,
                      std::initializer_list<const char*> names) {
  for (const char* name : names) app.get_option(name)->group(group);
}

}  // namespace pt::examples
