#pragma once
// Metrics as JSON lines (`--metrics file.jsonl`): one object per line, flushed as written, so a
// run can be followed with `tail -f` and read by any tool.
#include <cstdint>
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
  // Opens the file; throws FileError naming it when it cannot. A new run (resumed_at < 0)
  // truncates it. A run resumed from the checkpoint of step `resumed_at` continues it: the lines
  // of later steps (which the interrupted run wrote and this one trains again) are dropped, the
  // rest kept, and new lines appended.
  explicit MetricsWriter(const std::filesystem::path& path, int64_t resumed_at = -1);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  bool enabled() const { return file_ != nullptr; }
  // Throws FileError naming the file when the line cannot be written (a full disk): a run must
  // not go on without the record it was asked to keep.
  void write(const std::vector<std::pair<std::string, MetricValue>>& fields);

 private:
  std::FILE* file_ = nullptr;
  std::filesystem::path path_;
};

// One JSON object on one line from (key, value) pairs; strings are escaped.
std::string json_line(const std::vector<std::pair<std::string, MetricValue>>& fields);

}  // namespace pt
