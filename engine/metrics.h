#pragma once
// Metrics as JSON lines (`--metrics file.jsonl`): one object per line, flushed as written, so a
// run can be followed with `tail -f` and read by any tool.
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace pt {

using MetricValue = std::variant<int64_t, double, std::string>;

class MetricsWriter {
 public:
  MetricsWriter() = default;  // disabled: write() does nothing
  // Opens (truncates) the file; throws FileError naming it when it cannot.
  explicit MetricsWriter(const std::filesystem::path& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  bool enabled() const { return file_ != nullptr; }
  void write(const std::vector<std::pair<std::string, MetricValue>>& fields);

 private:
  std::FILE* file_ = nullptr;
};

// One JSON object on one line from (key, value) pairs; strings are escaped.
std::string json_line(const std::vector<std::pair<std::string, MetricValue>>& fields);

}  // namespace pt
