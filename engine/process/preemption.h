#pragma once
// Preemption: batch schedulers send SIGTERM some time before they kill a job, and users press
// Ctrl-C (SIGINT). A run that watches for them finishes the step it is in, writes a checkpoint
// (when --save is given) and exits with kExitPreempted, so that the job can be resumed later with
// --resume. A second signal of the same kind ends the process at once, as usual.
//
// Under mpirun the processes agree: requested(world) is true on every process at the same step
// when any process received a signal (schedulers signal all of them, not always at once).
// SIGUSR2 is a third stop signal, for mpirun: Open MPI 4.1's mpirun does not forward a SIGTERM.
// It sends SIGCONT, sleeps odls_base_sigkill_timeout (default 1 s), then SIGTERM, sleeps again,
// then SIGKILL; so a stop needs either a small timeout (and a step plus a save within it) or a
// SIGTERM held that long. SIGUSR2 it forwards to every rank at once and kills nothing, so
// `kill -USR2 <mpirun>` stops a job cleanly (docs/checkpoints.md "Preemption"). A repeated
// SIGUSR2 changes nothing (a rank may get one from mpirun and one from the scheduler).
// srun forwards SIGTERM at once and SIGKILLs after Slurm's KillWait (default 30 s).
#include "engine/comm/communicator.h"

namespace pt {

// EX_TEMPFAIL: stopped early on purpose; resume with --resume.
inline constexpr int kExitPreempted = 75;

class PreemptionWatch {
 public:
  // Installs the SIGTERM and SIGINT handlers (one watch at a time).
  PreemptionWatch();
  // Restores the previous handlers.
  ~PreemptionWatch();
  PreemptionWatch(const PreemptionWatch&) = delete;
  PreemptionWatch& operator=(const PreemptionWatch&) = delete;

  // Whether to stop now: a signal arrived in this process (or `relayed`: another process's
  // request reached this one otherwise) or, with `world` (collective: every rank calls it at the
  // same point), in any process of it.
  bool requested(Communicator* world, bool relayed = false);
  // The signal that arrived ("SIGTERM", "SIGINT", or "a signal in another process").
  const char* which() const;
};

}  // namespace pt
