#include "engine/partition/partition_method.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"

namespace pt {

namespace {

constexpr std::string_view kLayoutPrefix = "layout:";

}  // namespace

PartitionMethod PartitionMethod::parse(std::string_view text) {
  using K = Kind;
  if (text == "uniform") return {K::uniform, {}};
  if (text == "params") return {K::params, {}};
  if (text == "time") return {K::time, {}};
  if (text == "memory") return {K::memory, {}};
  if (text.starts_with(kLayoutPrefix))
    return {K::layout, parse_layout(text.substr(kLayoutPrefix.size()))};
  throw UsageError(
      fmt::format("unknown partition method '{}': use one of uniform, params, time, memory, "
                  "layout:a,b,... (e.g. layout:3,3,2)",
                  text));
}

std::string PartitionMethod::str() const {
  switch (kind) {
    case Kind::uniform: return "uniform";
    case Kind::params: return "params";
    case Kind::time: return "time";
    case Kind::memory: return "memory";
    case Kind::layout: return fmt::format("layout:{}", fmt::join(layout, ","));
  }
  return "?";
}

std::vector<int> parse_layout(std::string_view text) {
  std::vector<int> counts;
  size_t at = 0;
  while (true) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view item = text.substr(at, comma - at);
    int v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size())
      throw UsageError(
          fmt::format("layout '{}' is not a comma-separated list of layer counts: "
                      "'{}' is not a number (e.g. layout:3,3,2)",
                      text, item));
    counts.push_back(v);
    if (comma == text.size()) return counts;
    at = comma + 1;
  }
}

}  // namespace pt
