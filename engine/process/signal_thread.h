#pragma once
// Signals handled on a thread that computes nothing.
//
// A process-directed signal (SIGTERM from a scheduler, Ctrl-C's SIGINT, SIGUSR1 for the flight
// recorder, SIGUSR2 to stop under mpirun) interrupts whichever thread does not block it, and its
// handler's frame is pushed on that thread's stack. Pushed onto a thread inside oneDNN's JIT GEMM
// it corrupted memory: 3 of 12 runs that got SIGTERM mid-training died in free() ("invalid size",
// "corrupted size vs. prev_size") or with SIGSEGV; with the handler on another stack, 0 of 16.
//
// route_signals_to_a_thread() blocks these signals in the calling thread — and so in every thread
// created after it, which inherit the mask (device workers, OpenMP and MPI threads) — and starts
// one thread that takes them with sigwait() and runs the handler installed for them at that
// moment (PreemptionWatch's, the flight recorder's), as the kernel would, SA_RESETHAND included;
// a signal without a handler gets its default action (the process ends with it). Handlers keep
// working unchanged where this is not called (a library user's own main).
//
// Call it first in main, before any thread exists: run_main does.
namespace pt {

// The signals routed: SIGTERM, SIGINT, SIGUSR1, SIGUSR2. Idempotent.
void route_signals_to_a_thread();

}  // namespace pt
