#include "engine/report/progress.h"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

namespace pt {

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

Progress::Progress(std::string label, int64_t total, int64_t every, std::FILE* out)
    : label_(std::move(label)),
      total_(std::max<int64_t>(1, total)),
      every_(std::max<int64_t>(1, every)),
      out_(out),
      terminal_(isatty(fileno(out)) != 0),
      start_(std::chrono::steady_clock::now()) {}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(int64_t done, const std::string& status) {
  const double elapsed = elapsed_seconds();
  const double eta =
      done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - done) : 0.0;
  if (terminal_) {
    // Redraw at most ~10 times a second, and always at the end.
    const auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * done / total_);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    fmt::print(out_, "\r{} [{}] {}/{} {} | {} elapsed, ETA {}\x1b[K", label_, bar, done, total_,
               status, format_duration(elapsed), format_duration(eta));
    line_open_ = true;
  } else if (done % every_ == 0 || done == total_) {
    fmt::print(out_, "{} {}/{} {} | {} elapsed, ETA {}\n", label_, done, total_, status,
               format_duration(elapsed), format_duration(eta));
  }
  std::fflush(out_);
}

void Progress::finish() {
  if (line_open_) fmt::print(out_, "\n");
  line_open_ = false;
  std::fflush(out_);
}

}  // namespace pt
