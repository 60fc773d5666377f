#pragma once
// Progress reporting for training loops: on a terminal, one line redrawn in place with a bar,
// rate and ETA; otherwise (logs, CI) a plain line every `every` steps and at the end.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace pt {

class Progress {
 public:
  // total = number of steps expected; `every` = plain-mode print interval.
  Progress(std::string label, int64_t total, int64_t every = 50, std::FILE* out = stdout);

  // Reports that `done` of `total` steps are done; `status` is appended ("loss 0.42 ...").
  void update(int64_t done, const std::string& status);
  // Ends the in-place line (terminal mode) so that later output starts on a new line.
  void finish();

  bool is_terminal() const { return terminal_; }
  double elapsed_seconds() const;

 private:
  std::string label_;
  int64_t total_, every_;
  std::FILE* out_;
  bool terminal_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
};

// "1h02m", "3m05s", "12s".
std::string format_duration(double seconds);

}  // namespace pt
