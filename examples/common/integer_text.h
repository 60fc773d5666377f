#pragma once
// CLI11 turns "--seed -1" into 2^64 - 1 for an unsigned option and clamps an integer beyond 64
// bits (--steps 99999999999999999999) without a word, and says "Could not convert" (exit 105) for
// "--ps abc". These validators look at the text before CLI11 converts it and refuse all three,
// naming the range (CLI11 prefixes the flag); examples/common/command_line.h makes it exit 2.
#include <charconv>
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace pt::examples {

// The whole text is one integer of type Int (no sign for an unsigned Int); else the reason.
template <typename Int>
std::string integer_text_error(const std::string& text, const char* range) {
  Int value{};
  const char* end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc() && stop == end) return {};
  return text + " must be an integer " + range;
}

// For int64_t options: the value must fit in 64 bits (the flag's own range is checked later).
inline const CLI::Validator kInt64Text(
    [](std::string& text) {
      return integer_text_error<int64_t>(text, "between -2^63 and 2^63 - 1");
    },
    "INT64");

// For int options (--threads, --layers, ...): the value must fit in 32 bits.
inline const CLI::Validator kIntText(
    [](std::string& text) { return integer_text_error<int>(text, "between -2^31 and 2^31 - 1"); },
    "INT");

// For uint64_t options (--seed): 0 .. 2^64 - 1, and no leading '-'.
inline const CLI::Validator kUint64Text(
    [](std::string& text) {
      return integer_text_error<uint64_t>(text, "between 0 and 2^64 - 1 (18446744073709551615)");
    },
    "UINT64");

// For an integer flag with a range of its own: text that is not an integer of type Int is
// refused with that range, as the later range check words it ("--ps: abc must be an integer
// between 1 and 1024 (parameter servers K)"), not with the type's.
template <typename Int>
CLI::Validator integer_text(std::string range) {
  return CLI::Validator(
      [range](std::string& text) { return integer_text_error<Int>(text, range.c_str()); }, "");
}

}  // namespace pt::examples
