#include "engine/setup/run_main.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "engine/comm/mpi.h"
#include "engine/core/error.h"
#include "engine/option_range.h"
#include "engine/preemption.h"
#include "engine/setup/training_options.h"

namespace pt {

namespace {

// Runs body and turns errors into one message and an exit code (2: bad input, 1: failure).
int report_errors(const std::function<int(Communicator*)>& body, Communicator* world, int rank) {
  const std::string who = world ? fmt::format("rank {}: ", rank) : "";
  try {
    return body(world);
  } catch (const UsageError& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}{}\n", who, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}{}\n", who, e.what());
    return 1;
  }
}

}  // namespace

int run_main(double timeout_s, const std::function<int(Communicator* world)>& body) {
  if (!launched_by_mpi()) return report_errors(body, nullptr, 0);
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
      world = mpi_world(timeout_s);
    } catch (const std::exception& e) {
      fmt::print(stderr, "error: rank {}: {}\n", rank, e.what());
      MpiRuntime::abort(1);
    }
    code = report_errors(body, world.get(), rank);
    // A stop on a signal is agreed by every rank (PreemptionWatch): they all return it and end
    // MPI normally. Any other failure is this rank's alone: end the job.
    if (code != 0 && code != kExitPreempted) MpiRuntime::abort(code);
  }
  return code;
}

}  // namespace pt
