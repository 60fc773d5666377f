#pragma once
// MPI communicators: one process per device, started by mpirun/srun. This header does not
// include <mpi.h>; only engine/comm/mpi*.cpp talk to MPI.
//
// Every blocking operation is a nonblocking MPI call polled with a deadline, so a rank whose
// peer died or took another path throws TimeoutError instead of hanging. After a collective timed
// out the communicator is unusable (MPI cannot cancel a collective; its buffer may still be
// written): callers report the error and end the job with MpiRuntime::abort.
#include <memory>

#include "engine/comm/communicator.h"

namespace pt {

// True when this process was started by an MPI launcher (mpirun, mpiexec, srun), judged from the
// environment variables the launchers set; false for a plain `./program`.
bool launched_by_mpi();

// MPI's lifetime in this process: MPI_Init_thread in the constructor, MPI_Finalize in the
// destructor. Create one, in main, before any communicator, and destroy every communicator
// before it. Requires MPI_THREAD_MULTIPLE: a compute thread and a gradient-reduction thread both
// call MPI; throws std::runtime_error when the MPI library does not provide it.
class MpiRuntime {
 public:
  MpiRuntime();
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

  // Ends every process of the job with exit code `code` (MPI_Abort on the world): a rank that
  // failed brings the job down instead of leaving its peers waiting until their timeouts.
  [[noreturn]] static void abort(int code);

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
};

// All processes of the job, in world rank order (a duplicate of MPI_COMM_WORLD, so pipetrain's
// messages never match a user's own). Collective; needs a live MpiRuntime.
std::unique_ptr<Communicator> mpi_world(double timeout_s);

}  // namespace pt
