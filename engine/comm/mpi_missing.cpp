// The MPI entry points of a build configured with -DPIPETRAIN_MPI=OFF (no MPI library on the
// machine, e.g. a GPU box used for single-process checks): everything works in one process, and
// a launch under mpirun fails with one message that says how to get MPI.
#include <cstdlib>

#include "engine/comm/mpi.h"
#include "engine/core/error.h"

namespace pt {

namespace {
constexpr const char* kMissing =
    "pipetrain was built without MPI (-DPIPETRAIN_MPI=OFF), so it cannot run under mpirun/srun: "
    "install libopenmpi-dev and rebuild, or run it as one process";
}  // namespace

MpiRuntime::MpiRuntime() { throw UsageError(kMissing); }

MpiRuntime::~MpiRuntime() = default;

void MpiRuntime::abort(int code) { std::_Exit(code); }

std::unique_ptr<Communicator> mpi_world(double) { throw UsageError(kMissing); }

}  // namespace pt
