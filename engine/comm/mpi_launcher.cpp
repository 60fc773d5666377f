// launched_by_mpi: read from the environment alone, so it is the same with or without MPI built
// in (a build without MPI still recognises mpirun and says it cannot take part).
#include <cstdlib>

#include "engine/comm/mpi.h"

namespace pt {

namespace {

bool env_set(const char* name) { return std::getenv(name) != nullptr; }

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

}  // namespace

bool launched_by_mpi() {
  // Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMIx launchers (Open MPI >= 4 prterun, srun
  // --mpi=pmix) set PMIX_RANK; MPICH/Intel MPI's hydra and srun --mpi=pmi2 set PMI_SIZE.
  if (env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMIX_RANK") || env_set("PMI_SIZE")) return true;
  // srun without an MPI plugin: SLURM_PROCID is also set inside a plain `sbatch` script, which is
  // not a launch of ranks, so require a job step of more than one task.
  return env_set("SLURM_PROCID") && env_int("SLURM_STEP_NUM_TASKS") > 1;
}

}  // namespace pt
