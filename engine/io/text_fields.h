#pragma once
// The line-oriented text files people write by hand (pipetrain-plan's layer-cost and cluster
// files): one record a line, fields split by blanks, '#' to the end of a line a comment. The
// reader checks every number against the range its field allows, so a mistyped or fuzzed file is
// refused with FILE:LINE, the field and what was expected; it never crashes or runs with a NaN.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pt {

struct TextLine {
  int number = 0;                       // 1-based
  std::vector<std::string_view> words;  // blank-separated, comment removed; never empty
};

// The non-blank, non-comment lines of `text` (views into it). Throws FileError "NAME:LINE: ..."
// for a NUL byte or a line over 4096 characters (not a text file).
std::vector<TextLine> text_lines(std::string_view text, const std::string& name);

// The whole of `word` as a finite decimal number in [lo, hi]; else FileError
// "NAME:LINE: FIELD is 'word': expected WHAT".
double number_field(std::string_view word, double lo, double hi, const std::string& name, int line,
                    std::string_view field, std::string_view what);
// The same, for a whole number (written as an integer or in e-notation, e.g. 1e9).
int64_t integer_field(std::string_view word, int64_t lo, int64_t hi, const std::string& name,
                      int line, std::string_view field, std::string_view what);

// The contents of `path`; FileError naming it when it cannot be read or is over 64 MiB.
std::string read_text_file(const std::string& path, std::string_view what);

}  // namespace pt
