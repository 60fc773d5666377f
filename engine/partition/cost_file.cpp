#include "engine/partition/cost_file.h"

#include <cmath>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/io/text_fields.h"
#include "engine/partition/byte_count.h"

namespace pt {

namespace {

constexpr double kMaxSeconds = 1e6;
constexpr int64_t kMaxBytes = int64_t{1} << 50;
constexpr int64_t kMaxSamples = int64_t{1} << 31;
constexpr size_t kMaxLayers = 1 << 20;

}  // namespace

int CostTables::layers() const {
  return by_samples.empty() ? 0 : static_cast<int>(by_samples.begin()->second.size());
}

std::vector<LayerProfile> CostTables::for_samples(int64_t samples) const {
  if (by_samples.empty() || samples < 1)
    throw UsageError(fmt::format("layer costs for {} samples: no table to scale from", samples));
  auto it = by_samples.upper_bound(samples);  // the first size above
  if (it != by_samples.begin()) --it;         // the nearest at or below, else the smallest
  if (it->first == samples) return it->second;
  const double ratio = static_cast<double>(samples) / static_cast<double>(it->first);
  // Up to 2^50 bytes x 2^40 / 1 samples: beyond int64_t, saturated (byte_count.h).
  const auto scaled = [&](int64_t bytes) {
    return bytes_from_double(static_cast<double>(bytes) * ratio);
  };
  std::vector<LayerProfile> out = it->second;
  for (LayerProfile& p : out) {
    p.forward_s *= ratio;
    p.backward_input_s *= ratio;
    p.backward_weight_s *= ratio;
    p.activation_bytes = scaled(p.activation_bytes);
    p.output_bytes = scaled(p.output_bytes);
  }
  return out;
}

CostTables parse_cost_text(std::string_view text, const std::string& name) {
  CostTables out;
  std::vector<LayerProfile>* table = nullptr;
  int table_line = 0, first_line = 0;
  size_t first_count = 0;  // layers of the first table read
  const auto check_count = [&] {
    if (table && table->empty())
      throw FileError(
          fmt::format("{}:{}: a 'samples' table without layer lines: expected one "
                      "line per layer after it",
                      name, table_line));
    if (table && first_count == 0) first_count = table->size();
    if (table && table->size() != first_count)
      throw FileError(fmt::format(
          "{}:{}: this table has {} layers, the first (line {}) {}: every table lists the same "
          "layers",
          name, table_line, table->size(), first_line, first_count));
  };
  int epilogue_line = 0;
  for (const TextLine& line : text_lines(text, name)) {
    if (line.words[0] == "epilogue") {
      if (epilogue_line)
        throw FileError(
            fmt::format("{}:{}: a second 'epilogue' line (the first is line {}): give "
                        "it once",
                        name, line.number, epilogue_line));
      if (line.words.size() != 3)
        throw FileError(fmt::format(
            "{}:{}: expected 'epilogue SERIAL UPDATE' (seconds per parameter: the gradient "
            "norm, the optimizer update)",
            name, line.number));
      epilogue_line = line.number;
      out.epilogue.serial_s_per_param = number_field(line.words[1], 0, 1, name, line.number,
                                                     "epilogue SERIAL", "seconds, 0 to 1");
      out.epilogue.update_s_per_param = number_field(line.words[2], 0, 1, name, line.number,
                                                     "epilogue UPDATE", "seconds, 0 to 1");
      continue;
    }
    if (line.words[0] == "samples") {
      check_count();
      if (line.words.size() != 2)
        throw FileError(
            fmt::format("{}:{}: expected 'samples N' (the micro-batch size of the "
                        "table below)",
                        name, line.number));
      const int64_t n = integer_field(line.words[1], 1, kMaxSamples, name, line.number, "samples",
                                      "a micro-batch size, 1 to 2^31");
      auto [it, fresh] = out.by_samples.try_emplace(n);
      if (!fresh)
        throw FileError(fmt::format("{}:{}: a second table for samples {}: give each size once",
                                    name, line.number, n));
      table = &it->second;
      table_line = line.number;
      if (first_line == 0) first_line = line.number;
      continue;
    }
    if (!table)
      throw FileError(
          fmt::format("{}:{}: a layer line before any 'samples N' line: start the "
                      "table with the micro-batch size its costs are for",
                      name, line.number));
    if (line.words.size() != 6)
      throw FileError(
          fmt::format("{}:{}: {} fields: expected 6 (forward_s backward_input_s backward_weight_s "
                      "activation_bytes output_bytes param_bytes)",
                      name, line.number, line.words.size()));
    if (table->size() >= kMaxLayers)
      throw FileError(
          fmt::format("{}:{}: more than {} layers in one table", name, line.number, kMaxLayers));
    const auto seconds = [&](int i, const char* field) {
      return number_field(line.words[static_cast<size_t>(i)], 0, kMaxSeconds, name, line.number,
                          field, "seconds, 0 to 1e6");
    };
    const auto bytes = [&](int i, const char* field) {
      return integer_field(line.words[static_cast<size_t>(i)], 0, kMaxBytes, name, line.number,
                           field, "whole bytes, 0 to 2^50");
    };
    LayerProfile p;
    p.forward_s = seconds(0, "forward_s");
    p.backward_input_s = seconds(1, "backward_input_s");
    p.backward_weight_s = seconds(2, "backward_weight_s");
    p.activation_bytes = bytes(3, "activation_bytes");
    p.output_bytes = bytes(4, "output_bytes");
    p.param_bytes = bytes(5, "param_bytes");
    table->push_back(p);
  }
  check_count();
  if (out.by_samples.empty())
    throw FileError(
        fmt::format("{}: no 'samples N' table: expected a layer-cost file (see "
                    "engine/partition/cost_file.h)",
                    name));
  return out;
}

CostTables read_cost_file(const std::string& path) {
  return parse_cost_text(read_text_file(path, "--costs"), path);
}

std::string cost_file_text(const CostTables& tables, std::string_view comment) {
  std::string out;
  size_t at = 0;
  while (at < comment.size()) {
    size_t end = comment.find('\n', at);
    if (end == std::string_view::npos) end = comment.size();
    out += fmt::format("# {}\n", comment.substr(at, end - at));
    at = end + 1;
  }
  out +=
      "# one table per micro-batch size; per layer: forward_s backward_input_s "
      "backward_weight_s activation_bytes output_bytes param_bytes\n";
  if (tables.epilogue.serial_s_per_param > 0 || tables.epilogue.update_s_per_param > 0)
    out += fmt::format(
        "# the step's epilogue, seconds per parameter: gradient norm, optimizer update\n"
        "epilogue {} {}\n",
        tables.epilogue.serial_s_per_param, tables.epilogue.update_s_per_param);
  for (const auto& [samples, layers] : tables.by_samples) {
    out += fmt::format("samples {}\n", samples);
    for (const LayerProfile& p : layers)
      out += fmt::format("{} {} {} {} {} {}\n", p.forward_s, p.backward_input_s,
                         p.backward_weight_s, p.activation_bytes, p.output_bytes, p.param_bytes);
  }
  return out;
}

}  // namespace pt
