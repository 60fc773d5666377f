#include "engine/core/device.h"

#include <charconv>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

const char* kind_name(DeviceKind kind) { return kind == DeviceKind::cpu ? "cpu" : "cuda"; }

std::string DeviceId::str() const { return fmt::format("{}:{}", kind_name(kind), index); }

namespace {

// The largest device index: beyond it a list such as cpu:0..999999 is a typo, not a machine.
constexpr int kMaxDeviceIndex = 4096;

int parse_index(std::string_view digits, std::string_view whole) {
  int value = -1;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  const bool number = ptr == digits.data() + digits.size() && !digits.empty() &&
                      (ec == std::errc() || ec == std::errc::result_out_of_range);
  if (number && (ec != std::errc() || value > kMaxDeviceIndex))
    throw UsageError(fmt::format("bad device '{}': the index {} is above the largest, {}", whole,
                                 digits, kMaxDeviceIndex));
  if (!number || value < 0)
    throw UsageError(
        fmt::format("bad device '{}': the index must be a number such as cpu:0 or cuda:1", whole));
  return value;
}

}  // namespace

DeviceId DeviceId::parse(std::string_view text) {
  auto colon = text.find(':');
  std::string_view kind = text.substr(0, colon);
  DeviceId id;
  if (kind == "cpu") {
    id.kind = DeviceKind::cpu;
  } else if (kind == "cuda") {
    id.kind = DeviceKind::cuda;
  } else {
    throw UsageError(fmt::format("unknown device '{}': use cpu:N or cuda:N", text));
  }
  id.index = colon == std::string_view::npos ? 0 : parse_index(text.substr(colon + 1), text);
  return id;
}

std::vector<DeviceId> parse_device_list(std::string_view text) {
  std::vector<DeviceId> out;
  while (!text.empty()) {
    auto comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (auto dots = item.find(".."); dots != std::string_view::npos) {
      DeviceId first = DeviceId::parse(item.substr(0, dots));
      int last = parse_index(item.substr(dots + 2), item);
      if (last < first.index)
        throw UsageError(
            fmt::format("bad device range '{}': the last index is below the first", item));
      for (int i = first.index; i <= last; ++i) out.push_back({first.kind, i});
    } else {
      out.push_back(DeviceId::parse(item));
    }
  }
  if (out.empty()) throw UsageError("empty device list: give e.g. --devices cpu:0,cpu:1");
  return out;
}

}  // namespace pt
