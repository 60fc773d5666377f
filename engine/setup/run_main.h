#pragma once
// The body of a training program's main(), for one process or one process per device under
// mpirun/srun:
//
//   int main(int argc, char** argv) {
//     ...parse the command line...
//     return pt::run_main(timeout_s, [&](pt::Communicator* world) { return train(world); });
//   }
#include <functional>
#include <string>

#include "engine/comm/communicator.h"

namespace pt {

// Without an MPI launcher runs body(nullptr). Under mpirun/srun starts MPI, silences stdout on
// ranks other than 0, runs body(world), and ends the whole job (MPI_Abort) when any rank fails,
// so no peer is left waiting (except kExitPreempted, engine/process/preemption.h, which every rank
// returns together and which ends MPI normally). Errors become one message on stderr ("error: ...",
// with the rank under MPI) and exit code 2 (bad input: UsageError) or 1. Returns body's exit code
// otherwise.
//
// With `flight_recorder_dir` (--flight-recorder DIR) each process writes its flight record
// (engine/trace/flight_watch.h) to DIR on SIGUSR1, and on a failure: the failing rank writes its
// own, asks every other rank for theirs and waits for them (at most 5 s) before ending the job.
// The world communicator and its groups record every call (engine/comm/recording_communicator.h).
int run_main(double timeout_s, const std::function<int(Communicator* world)>& body,
             const std::string& flight_recorder_dir = {});

// True on the process that speaks for the job (world rank 0, or no MPI).
inline bool speaks(Communicator* world) { return !world || world->rank() == 0; }

}  // namespace pt
