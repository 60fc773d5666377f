#pragma once
// Device ids: "cpu:0".."cpu:N-1" are virtual CPU devices, "cuda:N" are GPUs (served by the plugin).
#include <string>
#include <string_view>
#include <vector>

namespace pt {

enum class DeviceKind { cpu, cuda };

// "cpu" | "cuda": the text form, and the name its backend registers under
// (engine/core/backend_registry.h).
const char* kind_name(DeviceKind kind);

struct DeviceId {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  std::string str() const;
  bool operator==(const DeviceId&) const = default;

  // Parses "cpu:0", "cuda:1", "cpu" (= cpu:0). Throws UsageError naming the bad text.
  static DeviceId parse(std::string_view text);
};

// Parses a comma-separated list "cpu:0,cpu:1"; also "cpu:0..3" for a range.
std::vector<DeviceId> parse_device_list(std::string_view text);

}  // namespace pt
