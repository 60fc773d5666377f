#include "engine/setup/run_devices.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/devices/cuda_plugin.h"

namespace pt {

namespace {

// Under mpirun each process opens one device. "auto" there means this node's GPU number
// local rank mod GPUs (Open MPI and Slurm export the local rank), so the ranks of a node spread
// over its GPUs; without GPUs, CPU devices as usual.
std::string process_devices(const std::string& devices, Communicator* world) {
  if (!world || devices != "auto" || !cuda_status().available) return devices;
  int local_rank = world->rank();
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"})
    if (const char* v = std::getenv(name); v != nullptr && v[0] != '\0') {
      local_rank = std::atoi(v);
      break;
    }
  return fmt::format("cuda:{}", local_rank % static_cast<int>(cuda_status().devices.size()));
}

// Threads per process under mpirun: the cores this process may use, shared with the other
// processes of the job on this node (Open MPI and Slurm say how many there are).
int mpi_threads(int requested) {
  if (requested > 0) return requested;
  int local = 1;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS"})
    if (const char* v = std::getenv(var); v && std::atoi(v) > 0) {
      local = std::atoi(v);
      break;
    }
  // Open MPI binds each of up to 2 processes to its own core: then the affinity already says 1.
  const int cores = available_cores();
  return std::max(1, cores >= local ? cores / local : 1);
}

}  // namespace

DeviceSet open_run_devices(const TrainingOptions& opt, Communicator* world) {
  // In one process: one device per stage and replica. Under mpirun: one device per process.
  const int wanted = world ? 1 : opt.stages * opt.dp;
  DeviceSet devices = open_devices(process_devices(opt.devices, world), wanted,
                                   world ? mpi_threads(opt.threads) : opt.threads, opt.precision);
  if (opt.print && !devices.note.empty()) fmt::print("{}\n", devices.note);
  if (static_cast<int>(devices.backends.size()) != wanted)
    throw UsageError(fmt::format(
        "--devices {} lists {} device{} but {} needs {}{}", opt.devices, devices.backends.size(),
        devices.backends.size() == 1 ? "" : "s",
        world ? "each process under mpirun"
              : fmt::format("--stages {} x --dp {}", opt.stages, opt.dp),
        wanted, world ? "" : ": give one device per stage and replica (e.g. cpu:0..N-1)"));
  return devices;
}

DeviceSet open_devices_to_plan(const TrainingOptions& opt) {
  if (opt.devices == "auto")
    throw UsageError(
        "--plan auto plans over the devices it is given: list them, e.g. --devices cpu:0,cpu:1 "
        "(or cpu:0..3)");
  DeviceSet devices = open_devices(opt.devices, 1, opt.threads, opt.precision);
  if (opt.print && !devices.note.empty()) fmt::print("{}\n", devices.note);
  return devices;
}

}  // namespace pt
