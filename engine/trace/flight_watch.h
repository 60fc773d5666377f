#pragma once
// When the flight record is written (--flight-recorder DIR): each process writes its own file,
// DIR/rank-NNNNN.json (engine/trace/flight_record_file.h),
//  - on SIGUSR1, and training goes on;
//  - when its run ends with an error (a timeout or any other exception): run_main calls
//    dump_all(), which writes this rank's record and then asks every other rank for theirs
//    through a request file in DIR (DIR/dump-request), waiting a few seconds for them before the
//    job is aborted; a stalled rank answers too, since its watcher thread is not the stalled one.
//
// How SIGUSR1 stays async-signal-safe: the handler only write()s one byte to a pipe (the
// self-pipe trick; write is async-signal-safe and errno is restored). A watcher thread blocks in
// poll() on that pipe and does the real work (snapshot, JSON, atomic file write) in normal
// context. We chose this over a sigwait() thread because sigwait needs SIGUSR1 blocked in every
// thread of the process, including those MPI and OpenMP start before or behind our back; a
// handler plus a pipe works whatever the other threads' masks are. The same thread polls for the
// request file every 200 ms (one stat() call), which is how ranks on other hosts sharing DIR are
// reached without any communicator (which may be the very thing that hangs).
#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

namespace pt {

class FlightRecorderWatch {
 public:
  // Creates `dir` and the missing folders above it, or checks that it is a writable folder
  // (UsageError naming --flight-recorder otherwise, prepare_output_path in output_path.h),
  // installs the SIGUSR1 handler and starts the watcher thread. One watch per process.
  FlightRecorderWatch(std::filesystem::path dir, int world_rank, int world_size);
  // Stops the thread and restores the previous SIGUSR1 handler.
  ~FlightRecorderWatch();
  FlightRecorderWatch(const FlightRecorderWatch&) = delete;
  FlightRecorderWatch& operator=(const FlightRecorderWatch&) = delete;

  // Writes this rank's record now; errors are reported on stderr, never thrown (it runs on the
  // way out of a failure). The first failure's reason sticks: later dumps keep it (an empty
  // `reason`: only that).
  void dump(const std::string& reason, bool failure = false);
  // dump(reason, failure), then asks the other ranks to write theirs and waits until every rank's
  // file is at least as new as the request, at most `wait_s` seconds (a dead rank never answers).
  void dump_all(const std::string& reason, double wait_s);

  const std::filesystem::path& dir() const { return dir_; }

 private:
  void watch();
  std::filesystem::path request_path() const { return dir_ / "dump-request"; }

  std::filesystem::path dir_;
  int world_rank_, world_size_;
  std::filesystem::file_time_type started_;  // requests older than this are another run's
  std::filesystem::file_time_type handled_{};
  std::mutex mutex_;  // one dump at a time; failure_reason_
  std::string failure_reason_;
  int pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace pt
