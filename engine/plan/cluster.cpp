#include "engine/plan/cluster.h"

#include <array>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/io/text_fields.h"

namespace pt {

Cluster parse_cluster_text(std::string_view text, const std::string& name) {
  enum Key {
    devices,
    memory,
    per_node,
    intra_bw,
    intra_lat,
    inter_bw,
    inter_lat,
    allreduce_bw,
    allreduce_lat,  // optional from here
    peak_tflops,
    achieved,
    kKeys
  };
  struct Field {
    const char* key;
    double lo, hi;
    const char* what;
  };
  static constexpr std::array<Field, kKeys> fields{{
      {"devices", 1, 1 << 20, "a whole number of devices, 1 to 2^20"},
      {"memory_gib", 1.0 / 1024, 1 << 20, "GiB per device, 1/1024 to 2^20"},
      {"devices_per_node", 1, 1 << 20, "a whole number, 1 to 2^20"},
      {"intra_node_gb_per_s", 1e-3, 1e6, "GB/s (1e9 bytes), 0.001 to 1e6"},
      {"intra_node_latency_us", 0, 1e6, "microseconds, 0 to 1e6"},
      {"inter_node_gb_per_s", 1e-3, 1e6, "GB/s (1e9 bytes), 0.001 to 1e6"},
      {"inter_node_latency_us", 0, 1e6, "microseconds, 0 to 1e6"},
      {"allreduce_gb_per_s", 1e-3, 1e6, "GB/s (1e9 bytes), 0.001 to 1e6"},
      {"allreduce_latency_us", 0, 1e6, "microseconds, 0 to 1e6"},
      {"peak_tflops", 1e-6, 1e6, "the device's peak in 1e12 FLOP/s, 1e-6 to 1e6"},
      {"achieved_fraction", 1e-3, 1, "the share of the peak reached, 0.001 to 1"},
  }};
  std::array<double, kKeys> value{};
  std::array<int, kKeys> line_of{};
  for (const TextLine& line : text_lines(text, name)) {
    int k = 0;
    while (k < kKeys && line.words[0] != fields[static_cast<size_t>(k)].key) ++k;
    if (k == kKeys) {
      std::string keys;
      for (const Field& f : fields) keys += fmt::format("{}{}", keys.empty() ? "" : ", ", f.key);
      throw FileError(fmt::format("{}:{}: unknown key '{}': expected one of {}", name, line.number,
                                  line.words[0].substr(0, 64), keys));
    }
    const Field& f = fields[static_cast<size_t>(k)];
    if (line_of[static_cast<size_t>(k)] != 0)
      throw FileError(fmt::format("{}:{}: {} again (first on line {}): give each key once", name,
                                  line.number, f.key, line_of[static_cast<size_t>(k)]));
    if (line.words.size() != 2)
      throw FileError(fmt::format("{}:{}: {} takes one value ({}), not {}", name, line.number,
                                  f.key, f.what, line.words.size() - 1));
    const bool whole = k == devices || k == per_node;
    value[static_cast<size_t>(k)] =
        whole ? static_cast<double>(integer_field(line.words[1], static_cast<int64_t>(f.lo),
                                                  static_cast<int64_t>(f.hi), name, line.number,
                                                  f.key, f.what))
              : number_field(line.words[1], f.lo, f.hi, name, line.number, f.key, f.what);
    line_of[static_cast<size_t>(k)] = line.number;
  }
  for (int k = 0; k < allreduce_bw; ++k)
    if (line_of[static_cast<size_t>(k)] == 0)
      throw FileError(fmt::format(
          "{}: no {} line: expected '{} <{}>'", name, fields[static_cast<size_t>(k)].key,
          fields[static_cast<size_t>(k)].key, fields[static_cast<size_t>(k)].what));
  Cluster c;
  c.devices = static_cast<int>(value[devices]);
  c.devices_per_node = static_cast<int>(value[per_node]);
  c.memory_bytes = static_cast<int64_t>(value[memory] * (1 << 30));
  c.intra_node = {value[intra_bw] * 1e9, value[intra_lat] * 1e-6};
  c.inter_node = {value[inter_bw] * 1e9, value[inter_lat] * 1e-6};
  c.intra_node_allreduce = {
      line_of[allreduce_bw] ? value[allreduce_bw] * 1e9 : value[intra_bw] * 1e9,
      line_of[allreduce_lat] ? value[allreduce_lat] * 1e-6 : value[intra_lat] * 1e-6};
  if ((line_of[peak_tflops] != 0) != (line_of[achieved] != 0)) {
    const int given = line_of[peak_tflops] != 0 ? peak_tflops : achieved;
    throw FileError(fmt::format(
        "{}:{}: {} without {}: give both (the achieved FLOP/s is their product) or neither", name,
        line_of[static_cast<size_t>(given)], fields[static_cast<size_t>(given)].key,
        fields[static_cast<size_t>(given == peak_tflops ? achieved : peak_tflops)].key));
  }
  c.peak_flops_per_second = value[peak_tflops] * 1e12;
  c.achieved_fraction = value[achieved];
  if (c.devices % c.devices_per_node != 0 && c.devices > c.devices_per_node)
    throw FileError(fmt::format(
        "{}:{}: {} devices are not whole nodes of devices_per_node {} (line {}): give a multiple",
        name, line_of[devices], c.devices, c.devices_per_node, line_of[per_node]));
  return c;
}

Cluster read_cluster_file(const std::string& path) {
  return parse_cluster_text(read_text_file(path, "--cluster"), path);
}

namespace {

int64_t device_of(int S, int R, int r, int s, Placement p) {
  return p == Placement::stages ? static_cast<int64_t>(r) * S + s : static_cast<int64_t>(s) * R + r;
}

}  // namespace

const char* placement_name(Placement p) { return p == Placement::stages ? "stages" : "replicas"; }

std::vector<bool> boundaries_crossing_nodes(int S, int R, int devices_per_node, Placement p) {
  std::vector<bool> out(static_cast<size_t>(S > 1 ? S - 1 : 0), false);
  if (devices_per_node <= 0) return out;
  for (int r = 0; r < R; ++r)
    for (int s = 0; s + 1 < S; ++s)
      if (device_of(S, R, r, s, p) / devices_per_node !=
          device_of(S, R, r, s + 1, p) / devices_per_node)
        out[static_cast<size_t>(s)] = true;
  return out;
}

bool allreduce_crosses_nodes(int S, int R, int devices_per_node, Placement p) {
  if (devices_per_node <= 0 || R < 2) return false;
  for (int s = 0; s < S; ++s)  // a group's devices ascend with r: its ends tell
    if (device_of(S, R, 0, s, p) / devices_per_node !=
        device_of(S, R, R - 1, s, p) / devices_per_node)
      return true;
  return false;
}

}  // namespace pt
