#include "engine/setup/run_main.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "engine/comm/mpi.h"
#include "engine/comm/recording_communicator.h"
#include "engine/core/error.h"
#include "engine/core/option_range.h"
#include "engine/process/preemption.h"
#include "engine/process/signal_thread.h"
#include "engine/setup/training_options.h"
#include "engine/trace/flight_recorder.h"
#include "engine/trace/flight_watch.h"

namespace pt {

namespace {

// Runs body and turns errors into one message and an exit code (2: bad input, 1: failure).
// The error's text goes to *error too (for the flight record).
int report_errors(const std::function<int(Communicator*)>& body, Communicator* world, int rank,
                  std::string* error) {
  const std::string who = world ? fmt::format("rank {}: ", rank) : "";
  try {
    return body(world);
  } catch (const UsageError& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}{}\n", who, e.what());
    *error = e.what();
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}{}\n", who, e.what());
    *error = e.what();
    return 1;
  }
}

// How long a failing rank waits for the other ranks' flight records before it ends the job: they
// answer within the watcher's poll interval (0.2 s) plus the time to write a file; a dead rank
// never does.
constexpr double kFlightRecordWaitS = 5;

// body, with the flight recorder's watch (null without --flight-recorder) created first, so a
// bad folder is a usage error like any other.
std::function<int(Communicator*)> with_watch(const std::function<int(Communicator*)>& body,
                                             const std::string& flight_recorder_dir, int rank,
                                             int size,
                                             std::unique_ptr<FlightRecorderWatch>& watch) {
  return [&body, &flight_recorder_dir, rank, size, &watch](Communicator* world) {
    if (!flight_recorder_dir.empty())
      watch = std::make_unique<FlightRecorderWatch>(flight_recorder_dir, rank, size);
    return body(world);
  };
}

}  // namespace

int run_main(double timeout_s, const std::function<int(Communicator* world)>& body,
             const std::string& flight_recorder_dir) {
  route_signals_to_a_thread();  // before any thread exists: MPI's, the devices', OpenMP's
  std::unique_ptr<FlightRecorderWatch> watch;
  std::string error;
  if (!launched_by_mpi()) {
    const int code =
        report_errors(with_watch(body, flight_recorder_dir, 0, 1, watch), nullptr, 0, &error);
    if (code != 0 && code != kExitPreempted && watch) watch->dump_all(error, 0);
    return code;
  }
  // One process per device: world rank = replica * devices per replica + device. Rank 0 speaks
  // for the job; a rank that fails ends the whole job (MPI_Abort) instead of leaving its peers
  // waiting, after saying what went wrong.
  std::optional<MpiRuntime> mpi;
  try {
    mpi.emplace();
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: could not start MPI: {}\n", e.what());
    return 1;
  }
  const int rank = mpi->world_rank();
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout))
    fmt::print(stderr, "rank {}: could not silence stdout\n", rank);
  int code = 0;
  {
    std::unique_ptr<Communicator> world;
    try {
      // Before the communicator's deadline is computed from it (TrainingOptions::check is later).
      check_real("--timeout", timeout_s, {.lo = 0, .lo_open = true, .hi = kMaxTimeoutS}, "seconds");
      // Every call recorded in the flight recorder (always on; written with --flight-recorder).
      world = record_calls(mpi_world(timeout_s), "world", flight_recorder());
    } catch (const std::exception& e) {
      fmt::print(stderr, "error: rank {}: {}\n", rank, e.what());
      MpiRuntime::abort(1);
    }
    code = report_errors(with_watch(body, flight_recorder_dir, rank, mpi->world_size(), watch),
                         world.get(), rank, &error);
    // A stop on a signal is agreed by every rank (PreemptionWatch): they all return it and end
    // MPI normally. Any other failure is this rank's alone: end the job, after the flight records
    // of every rank that still answers are written.
    if (code != 0 && code != kExitPreempted) {
      if (watch) watch->dump_all(error, kFlightRecordWaitS);
      MpiRuntime::abort(code);
    }
    watch.reset();  // before the communicators it may be recording
  }
  return code;
}

}  // namespace pt
