#pragma once
// The check of a bench's count and size flags: a number above zero. CLI11's PositiveNumber
// answers 0 with "Value 0 not in range 0.000000 to 1797693134862315708...": this names what is
// wanted and what was given.
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

namespace pt::bench {

inline const CLI::Validator kPositive(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(v > 0))
        return "must be a number above 0, not '" + text + "'";
      return std::string();
    },
    "> 0");

}  // namespace pt::bench
