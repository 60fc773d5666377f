#include "engine/io/text_fields.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

namespace {

constexpr size_t kMaxLine = 4096;
constexpr std::streamoff kMaxFile = std::streamoff{64} << 20;

[[noreturn]] void refuse(const std::string& name, int line, std::string_view field,
                         std::string_view word, std::string_view what) {
  throw FileError(
      fmt::format("{}:{}: {} is '{}': expected {}", name, line, field, word.substr(0, 64), what));
}

}  // namespace

std::vector<TextLine> text_lines(std::string_view text, const std::string& name) {
  std::vector<TextLine> out;
  int number = 0;
  size_t at = 0;
  while (at < text.size()) {
    ++number;
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.size() > kMaxLine)
      throw FileError(
          fmt::format("{}:{}: a line of {} characters: expected a text file (lines "
                      "of at most {})",
                      name, number, line.size(), kMaxLine));
    if (line.find('\0') != std::string_view::npos)
      throw FileError(fmt::format("{}:{}: a NUL byte: expected a text file", name, number));
    if (const size_t hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    TextLine t{number, {}};
    size_t i = 0;
    const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
    while (i < line.size()) {
      while (i < line.size() && blank(line[i])) ++i;
      const size_t start = i;
      while (i < line.size() && !blank(line[i])) ++i;
      if (i > start) t.words.push_back(line.substr(start, i - start));
    }
    if (!t.words.empty()) out.push_back(std::move(t));
  }
  return out;
}

double number_field(std::string_view word, double lo, double hi, const std::string& name, int line,
                    std::string_view field, std::string_view what) {
  double v = 0;
  const char* end = word.data() + word.size();
  const auto [stop, ec] = std::from_chars(word.data(), end, v);
  // from_chars reads "nan" and "inf" too: the range check below refuses them.
  if (ec != std::errc() || stop != end || !std::isfinite(v) || v < lo || v > hi)
    refuse(name, line, field, word, what);
  return v;
}

int64_t integer_field(std::string_view word, int64_t lo, int64_t hi, const std::string& name,
                      int line, std::string_view field, std::string_view what) {
  const double v =
      number_field(word, static_cast<double>(lo), static_cast<double>(hi), name, line, field, what);
  if (v != std::floor(v)) refuse(name, line, field, word, what);
  return static_cast<int64_t>(v);
}

std::string read_text_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(fmt::format("{} {}: cannot be read: give an existing file", what, path));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || size > kMaxFile)
    throw FileError(fmt::format("{} {}: not a readable text file of at most 64 MiB", what, path));
  in.seekg(0);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace pt
