#include "engine/trace/flight_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/output_path.h"
#include "engine/trace/flight_record_file.h"
#include "engine/trace/flight_recorder.h"

namespace pt {

namespace {

namespace fs = std::filesystem;

// The write end, for the handler (a lock-free atomic: safe to read in a signal handler).
std::atomic<int> g_signal_pipe{-1};
static_assert(std::atomic<int>::is_always_lock_free);
struct sigaction g_old_usr1 {};

extern "C" void on_usr1(int) {
  const int saved = errno;
  const char byte = 'u';
  const int fd = g_signal_pipe.load();
  if (fd >= 0) {
    [[maybe_unused]] const auto n = ::write(fd, &byte, 1);  // nothing to do if the pipe is full
  }
  errno = saved;
}

constexpr int kPollMs = 200;

fs::file_time_type mtime(const fs::path& p) {
  std::error_code ec;
  const auto t = fs::last_write_time(p, ec);
  return ec ? fs::file_time_type::min() : t;
}

}  // namespace

FlightRecorderWatch::FlightRecorderWatch(fs::path dir, int world_rank, int world_size)
    : dir_(std::move(dir)), world_rank_(world_rank), world_size_(world_size) {
  // A writable folder, created with the missing folders above it (engine/io/output_path.h).
  prepare_output_path(dir_, "--flight-recorder", OutputKind::folder);
  if (g_signal_pipe >= 0) throw std::logic_error("FlightRecorderWatch: only one at a time");
  // Compared with the mtime of files in dir_: take "now" from the file system's own clock.
  started_ = fs::file_time_type::clock::now();
  handled_ = started_;
  if (::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(fmt::format("FlightRecorderWatch: pipe2 failed (errno {})", errno));
  g_signal_pipe = pipe_[1];
  struct sigaction sa {};
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, &g_old_usr1);
  thread_ = std::thread([this] { watch(); });
}

FlightRecorderWatch::~FlightRecorderWatch() {
  sigaction(SIGUSR1, &g_old_usr1, nullptr);
  const char quit = 'q';
  [[maybe_unused]] const auto n = ::write(pipe_[1], &quit, 1);
  thread_.join();
  g_signal_pipe = -1;
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

void FlightRecorderWatch::watch() {
  for (;;) {
    pollfd p{pipe_[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, kPollMs);
    if (ready > 0) {
      char bytes[64];
      const auto n = ::read(pipe_[0], bytes, sizeof(bytes));
      bool usr1 = false;
      for (ssize_t i = 0; i < n; ++i) {
        if (bytes[i] == 'q') return;
        usr1 = usr1 || bytes[i] == 'u';
      }
      if (usr1) dump("SIGUSR1");
    }
    // A request by another rank (or an earlier one of ours, already handled).
    const fs::path request = request_path();
    const auto t = mtime(request);
    if (t > handled_) {
      handled_ = t;
      std::string who;
      std::ifstream in(request);
      std::getline(in, who);
      // Already written since (our own failure, just before our own request): nothing new. A
      // request that replaced another before we saw it is answered all the same, so every
      // rank's file ends up newer than the last request, which is what dump_all waits for.
      if (mtime(flight_record_path(dir_, world_rank_)) >= t) continue;
      const auto colon = who.find(':');
      const std::string from = colon == std::string::npos ? "another rank" : who.substr(0, colon);
      // Our own request (it replaced another's): written again, under our own failure's reason.
      dump(from == fmt::format("rank {}", world_rank_)
               ? std::string()
               : fmt::format("asked by {}, which failed", from));
    }
  }
}

void FlightRecorderWatch::dump(const std::string& reason, bool failure) {
  std::lock_guard lock(mutex_);
  if (failure && failure_reason_.empty()) failure_reason_ = reason;
  // A rank that failed says why, however often its record is written again afterwards.
  const std::string why = failure_reason_.empty() || reason.empty() || failure_reason_ == reason
                              ? reason
                              : fmt::format("{} (written again: {})", failure_reason_, reason);
  try {
    write_flight_record(dir_,
                        capture_flight_record(flight_recorder(), world_rank_, world_size_, why));
  } catch (const std::exception& e) {
    fmt::print(stderr, "rank {}: could not write the flight record to {}: {}\n", world_rank_,
               dir_.string(), e.what());
  }
}

void FlightRecorderWatch::dump_all(const std::string& reason, double wait_s) {
  dump(reason, /*failure=*/true);
  if (world_size_ < 2) return;
  try {
    const std::string text = fmt::format("rank {}: {}\n", world_rank_, reason);
    write_file_atomically(request_path(), std::as_bytes(std::span(text.data(), text.size())));
  } catch (const std::exception& e) {
    fmt::print(stderr, "rank {}: could not ask the other ranks for their flight records: {}\n",
               world_rank_, e.what());
    return;
  }
  const auto asked = mtime(request_path());
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(wait_s));
  while (std::chrono::steady_clock::now() < until) {
    bool all = true;
    for (int r = 0; r < world_size_ && all; ++r)
      all = r == world_rank_ || mtime(flight_record_path(dir_, r)) >= asked;
    if (all) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::string missing;
  for (int r = 0; r < world_size_; ++r)
    if (r != world_rank_ && mtime(flight_record_path(dir_, r)) < asked)
      missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
  fmt::print(stderr, "rank {}: no new flight record from rank {} after {:g} s; ending the job\n",
             world_rank_, missing, wait_s);
}

}  // namespace pt
