#include "engine/setup/run_devices.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/devices/cuda_plugin.h"
#include "engine/setup/node_placement.h"

namespace pt {

namespace {

// Under mpirun/srun each process opens one device. "auto" there means this node's GPU number
// local rank mod GPUs (node_placement.h), so the ranks of a node spread over the GPUs the job
// was given; without GPUs, CPU devices as usual.
std::string process_devices(const std::string& devices, const NodePlacement& node) {
  if (devices != "auto" || !cuda_status().available) return devices;
  return fmt::format("cuda:{}", gpu_for_local_rank(node.local_rank,
                                                   static_cast<int>(cuda_status().devices.size())));
}

// Threads per process under mpirun/srun: the cores this process may use, shared with the other
// processes of the job on this node.
int mpi_threads(int requested, const NodePlacement& node) {
  if (requested > 0) return requested;
  // Open MPI binds each of up to 2 processes to its own core: then the affinity already says 1.
  const int cores = available_cores();
  return std::max(1, cores >= node.local_size ? cores / node.local_size : 1);
}

}  // namespace

DeviceSet open_run_devices(const TrainingOptions& opt, Communicator* world) {
  // In one process: one device per stage and replica. Under mpirun: one device per process.
  const int wanted = world ? 1 : opt.stages * opt.dp * opt.tp;
  DeviceSet devices;
  if (world) {
    // Collective, on every rank alike: the options are the same everywhere.
    const NodePlacement node =
        (opt.devices == "auto" || opt.threads <= 0) ? node_placement(*world) : NodePlacement{};
    devices = open_devices(process_devices(opt.devices, node), wanted,
                           mpi_threads(opt.threads, node), opt.precision, opt.attention);
  } else {
    devices = open_devices(opt.devices, wanted, opt.threads, opt.precision, opt.attention);
  }
  if (opt.print && !devices.note.empty()) fmt::print("{}\n", devices.note);
  if (static_cast<int>(devices.backends.size()) != wanted)
    throw UsageError(fmt::format(
        "--devices {} lists {} device{} but {} needs {}{}", opt.devices, devices.backends.size(),
        devices.backends.size() == 1 ? "" : "s",
        world ? "each process under mpirun"
              : fmt::format("--stages {} x --dp {}{}", opt.stages, opt.dp,
                            opt.tp > 1 ? fmt::format(" x --tp {}", opt.tp) : ""),
        wanted,
        world ? "" : ": give one device per stage, replica and tensor rank (e.g. cpu:0..N-1)"));
  return devices;
}

DeviceSet open_devices_to_plan(const TrainingOptions& opt) {
  if (opt.devices == "auto")
    throw UsageError(
        "--plan auto plans over the devices it is given: list them, e.g. --devices cpu:0,cpu:1 "
        "(or cpu:0..3)");
  DeviceSet devices = open_devices(opt.devices, 1, opt.threads, opt.precision, opt.attention);
  if (opt.print && !devices.note.empty()) fmt::print("{}\n", devices.note);
  return devices;
}

}  // namespace pt
