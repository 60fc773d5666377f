#include "schedule/text_format.h"

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "schedule/str_cat.h"
#include "schedule/validate.h"

namespace pt::sched {

namespace {

using detail::cat;

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  size_t k = 0;
  while (k < line.size()) {
    while (k < line.size() && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r')) ++k;
    const size_t start = k;
    while (k < line.size() && line[k] != ' ' && line[k] != '\t' && line[k] != '\r') ++k;
    if (k > start) words.push_back(line.substr(start, k - start));
  }
  return words;
}

std::optional<int> to_int(std::string_view word) {
  int value = 0;
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (ec != std::errc() || end != word.data() + word.size()) return std::nullopt;
  return value;
}

// What a schedule header may claim: far above any cluster a what-if run models (4,096 devices x
// 1,024 micro-batches), far below what would exhaust memory.
constexpr int kMaxHeaderValue[3] = {1 << 16, 1 << 16, 1 << 20};  // devices, stages, microbatches
constexpr int64_t kMaxStageMicrobatchCells = int64_t{1} << 24;
// A schedule file is read whole; a larger one is not a schedule (1 GiB holds ~100M actions).
constexpr uintmax_t kMaxScheduleFileBytes = uintmax_t{1} << 30;

class Parser {
 public:
  explicit Parser(std::string_view source) : source_(source) {}

  Schedule parse(std::string_view text) {
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      ++line_no_;
      std::string_view line = text.substr(start, end - start);
      if (const size_t hash = line.find('#'); hash != std::string_view::npos)
        line = line.substr(0, hash);
      const auto words = split_words(line);
      if (!words.empty()) parse_line(words);
      start = end + 1;
    }
    if (!have_header_) fail_at(0, "no 'pipeline devices=D stages=S microbatches=M' line");
    for (size_t d = 0; d < seen_device_.size(); ++d)
      if (!seen_device_[d])
        fail_at(0, "no line for device " + std::to_string(d) + " (expected 'device " +
                       std::to_string(d) + ": ...', one per device 0.." +
                       std::to_string(schedule_.num_devices - 1) + ")");
    return schedule_;
  }

 private:
  std::string_view source_;
  int line_no_ = 0;
  bool have_header_ = false;
  bool have_placement_ = false;
  bool have_device_line_ = false;
  std::vector<bool> seen_device_;
  Schedule schedule_;

  [[noreturn]] void fail_at(int line, const std::string& message) const {
    std::string where(source_);
    if (line > 0) where += ", line " + std::to_string(line);
    throw std::invalid_argument(where + ": " + message);
  }
  [[noreturn]] void fail(const std::string& message) const { fail_at(line_no_, message); }

  void parse_line(const std::vector<std::string_view>& words) {
    if (words[0] == "pipeline") return parse_header(words);
    if (!have_header_)
      fail("expected 'pipeline devices=D stages=S microbatches=M' first, found '" +
           std::string(words[0]) + "'");
    if (words[0] == "placement") return parse_placement(words);
    if (words[0] == "device") return parse_device(words);
    fail("unknown line starting with '" + std::string(words[0]) +
         "' (expected 'placement ...' or 'device N: ...')");
  }

  void parse_header(const std::vector<std::string_view>& words) {
    if (have_header_) fail("a second 'pipeline' line");
    static constexpr std::string_view keys[] = {"devices=", "stages=", "microbatches="};
    if (words.size() != 4)
      fail("the header is 'pipeline devices=D stages=S microbatches=M' (" +
           std::to_string(words.size() - 1) + " fields found)");
    int values[3] = {0, 0, 0};
    for (size_t k = 0; k < 3; ++k) {
      const std::string_view w = words[k + 1];
      const auto value = w.starts_with(keys[k]) ? to_int(w.substr(keys[k].size())) : std::nullopt;
      if (!value || *value < 1)
        fail("expected " + std::string(keys[k]) + "N with N >= 1 as field " +
             std::to_string(k + 1) + " of the header, found '" + std::string(w) + "'");
      values[k] = *value;
    }
    // Bounded before anything is allocated: a header claiming billions of devices or cells would
    // otherwise end in bad_alloc (or a validator running for hours) instead of an error.
    for (size_t k = 0; k < 3; ++k)
      if (values[k] > kMaxHeaderValue[k])
        fail(cat("header field ", keys[k], std::to_string(values[k]), " exceeds the limit of ",
                 std::to_string(kMaxHeaderValue[k]), " (a corrupt or mistyped header?)"));
    if (int64_t{values[1]} * values[2] > kMaxStageMicrobatchCells)
      fail(cat("stages x microbatches = ", std::to_string(int64_t{values[1]} * values[2]),
               " exceeds the limit of ", std::to_string(kMaxStageMicrobatchCells),
               " (the validator tracks every stage and micro-batch)"));
    schedule_ = empty_schedule(values[0], values[1], values[2]);
    seen_device_.assign(static_cast<size_t>(values[0]), false);
    have_header_ = true;
  }

  void parse_placement(const std::vector<std::string_view>& words) {
    if (have_placement_) fail("a second 'placement' line");
    if (have_device_line_) fail("'placement' must come before the device lines");
    const size_t S = static_cast<size_t>(schedule_.num_stages);
    if (words.size() - 1 != S)
      fail("placement lists " + std::to_string(words.size() - 1) + " devices for " +
           std::to_string(S) + " stages; give one device per stage");
    for (size_t k = 0; k < S; ++k) {
      const auto d = to_int(words[k + 1]);
      if (!d || *d < 0 || *d >= schedule_.num_devices)
        fail("placement of stage " + std::to_string(k) + " is '" + std::string(words[k + 1]) +
             "'; expected a device in 0.." + std::to_string(schedule_.num_devices - 1));
      schedule_.stage_device[k] = *d;
    }
    have_placement_ = true;
  }

  void parse_device(const std::vector<std::string_view>& words) {
    // "device 3:" — the colon may also stand alone ("device 3 :").
    std::string_view id = words.size() > 1 ? words[1] : std::string_view();
    size_t first_action = 2;
    if (id.ends_with(':')) {
      id.remove_suffix(1);
    } else if (words.size() > 2 && words[2] == ":") {
      first_action = 3;
    } else {
      fail("expected 'device N: actions...'");
    }
    const auto d = to_int(id);
    if (!d || *d < 0 || *d >= schedule_.num_devices)
      fail("device '" + std::string(id) + "' is not in 0.." +
           std::to_string(schedule_.num_devices - 1));
    if (seen_device_[static_cast<size_t>(*d)])
      fail("a second line for device " + std::to_string(*d) + " (one line per device)");
    seen_device_[static_cast<size_t>(*d)] = true;
    have_device_line_ = true;
    auto& list = schedule_.actions[static_cast<size_t>(*d)];
    for (size_t k = first_action; k < words.size(); ++k) {
      const auto action = parse_action(words[k]);
      if (!action)
        fail(cat("'", words[k], "' (device ", std::to_string(*d), ", step ",
                 std::to_string(list.size()),
                 ") is not an action: expected STAGE TYPE MICROBATCH like 2F0, 1SEND_B3, or "
                 "0REDUCE_GRAD"));
      list.push_back(*action);
    }
  }
};

}  // namespace

std::string to_text(const Schedule& schedule) {
  std::string out = "pipeline devices=" + std::to_string(schedule.num_devices) +
                    " stages=" + std::to_string(schedule.num_stages) +
                    " microbatches=" + std::to_string(schedule.microbatches) + "\n";
  const Schedule defaults =
      empty_schedule(schedule.num_devices, schedule.num_stages, schedule.microbatches);
  if (schedule.stage_device != defaults.stage_device) {
    out += "placement";
    for (int d : schedule.stage_device) out += cat(" ", std::to_string(d));
    out += "\n";
  }
  for (size_t d = 0; d < schedule.actions.size(); ++d) {
    out += cat("device ", std::to_string(d), ":");
    for (const Action& a : schedule.actions[d]) out += cat(" ", a.str());
    out += "\n";
  }
  return out;
}

Schedule parse_schedule_text(std::string_view text, std::string_view source) {
  return Parser(source).parse(text);
}

Schedule read_schedule_file(const std::string& path) {
  // Opening a FIFO blocks until a writer comes (forever, for a typo): only a regular file (or a
  // link to one) is read. A missing file is left to the open's message.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw std::invalid_argument("cannot read schedule file '" + path + "': it is " +
                                (std::filesystem::is_directory(st) ? "a folder"
                                 : std::filesystem::is_fifo(st)    ? "a FIFO (named pipe)"
                                                                   : "a device or socket") +
                                ", not a regular file; give a schedule text file");
  if (std::filesystem::exists(st)) {
    const uintmax_t bytes = std::filesystem::file_size(path, ec);
    if (!ec && bytes > kMaxScheduleFileBytes)
      throw std::invalid_argument("cannot read schedule file '" + path + "': it has " +
                                  std::to_string(bytes) + " bytes, more than the limit of " +
                                  std::to_string(kMaxScheduleFileBytes) +
                                  "; it is not a schedule text file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot open schedule file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  Schedule schedule = parse_schedule_text(text.str(), path);
  const Validation v = validate(schedule);
  if (!v.ok()) throw std::invalid_argument(path + ": " + v.report);
  return schedule;
}

}  // namespace pt::sched
