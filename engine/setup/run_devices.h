#pragma once
// Step 2 of assembling a run (training_run.h): the devices, opened once. In one process, one
// device per stage and replica (--devices lists them); under mpirun/srun, one per process ("auto":
// this node's GPU local rank mod GPUs, node_placement.h), with the cores shared between the
// node's processes.
#include "engine/comm/communicator.h"
#include "engine/devices/devices.h"
#include "engine/setup/training_options.h"

namespace pt {

// Opens the devices `opt` asks for (printing the device note unless !opt.print) and checks their
// number: stages x dp, or 1 under mpirun. Throws UsageError naming the fix.
DeviceSet open_run_devices(const TrainingOptions& opt, Communicator* world);

// The devices --plan auto plans over: every device listed, as listed (a list is required).
DeviceSet open_devices_to_plan(const TrainingOptions& opt);

}  // namespace pt
