#include "engine/report/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <span>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/output_path.h"

namespace pt {

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<int>(c));
        else
          out += c;
    }
  }
  return out;
}

}  // namespace

std::string json_line(const std::vector<std::pair<std::string, MetricValue>>& fields) {
  std::string out = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ", ";
    out += fmt::format("\"{}\": ", escape(fields[i].first));
    const MetricValue& v = fields[i].second;
    if (const auto* n = std::get_if<int64_t>(&v)) {
      out += std::to_string(*n);
    } else if (const auto* d = std::get_if<double>(&v)) {
      // JSON has no inf/nan: write null so every line stays parseable.
      out += std::isfinite(*d) ? fmt::format("{}", *d) : "null";
    } else {
      out += fmt::format("\"{}\"", escape(std::get<std::string>(v)));
    }
  }
  return out + "}";
}

MetricsWriter::MetricsWriter(const std::filesystem::path& path, int64_t resumed_at) : path_(path) {
  prepare_output_path(path, "--metrics");  // the missing folders above it; refuses a FIFO ...
  if (resumed_at >= 0) {
    // Keep the lines of steps up to the checkpoint (a line without a step is kept as it is).
    std::ifstream in(path);
    std::string kept, line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.contains("step") &&
          j["step"].is_number_integer() && j["step"].get<int64_t>() > resumed_at)
        continue;
      kept += line + "\n";
    }
    if (in.is_open())
      write_file_atomically(path, std::as_bytes(std::span(kept.data(), kept.size())));
  }
  file_ = std::fopen(path.c_str(), resumed_at >= 0 ? "a" : "w");
  if (!file_)
    throw FileError(
        fmt::format("cannot open metrics file {}: {}", path.string(), std::strerror(errno)));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const std::vector<std::pair<std::string, MetricValue>>& fields) {
  if (!file_) return;
  const std::string line = json_line(fields) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    const int err = errno;
    std::fclose(file_);
    file_ = nullptr;
    throw FileError(
        fmt::format("writing the metrics file {} failed: {}; free space or choose "
                    "another --metrics path, then resume from the last checkpoint",
                    path_.string(), std::strerror(err)));
  }
}

}  // namespace pt
