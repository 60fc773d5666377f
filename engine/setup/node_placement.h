#pragma once
// Where a process of a multi-process run sits on its node, and which GPU it takes there.
//
// The local rank (this process's index among the job's processes on its node) and the local size
// come from MPI under every launcher (mpirun, srun --mpi=pmix, hydra): each process gathers every
// process's host name over the world communicator. Launchers' variables disagree (srun sets
// SLURM_LOCALID but not OMPI_COMM_WORLD_LOCAL_RANK; SLURM_NTASKS_PER_NODE only when asked for),
// so none is read here.
//
// The GPU: CUDA numbers the devices the job was given from 0 (CUDA_VISIBLE_DEVICES, which Slurm
// sets to the job's or the task's GPUs, already remaps them), so local rank r takes
// cuda:(r mod visible), as torchrun's LOCAL_RANK and Megatron's `rank % device_count` do.
#include <string>
#include <vector>

#include "engine/comm/communicator.h"

namespace pt {

struct NodePlacement {
  int local_rank = 0;  // among the processes on this node, in world rank order
  int local_size = 1;  // processes on this node
};

// Pure: `hosts[r]` is world rank r's host name; the placement of world rank `rank`.
NodePlacement place_on_node(const std::vector<std::string>& hosts, int rank);

// Collective over `world` (every rank calls it at the same point): gathers the host names.
NodePlacement node_placement(Communicator& world);

// Pure: the CUDA ordinal for local rank `local_rank` when `visible_gpus` (> 0) are visible.
int gpu_for_local_rank(int local_rank, int visible_gpus);

}  // namespace pt
