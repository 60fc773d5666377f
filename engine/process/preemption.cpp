#include "engine/process/preemption.h"

#include <csignal>

#include "engine/core/error.h"

namespace pt {

namespace {

volatile std::sig_atomic_t g_signal = 0;
bool g_installed = false;
struct sigaction g_old_term {
}, g_old_int{}, g_old_usr2{};

extern "C" void on_stop_signal(int sig) { g_signal = sig; }

}  // namespace

PreemptionWatch::PreemptionWatch() {
  if (g_installed) throw std::logic_error("PreemptionWatch: only one at a time");
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_RESTART;  // the second signal takes the default action
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
  // SIGUSR2 asks for the same stop but never kills: Open MPI's mpirun forwards it to every rank
  // at once (a SIGTERM it holds for odls_base_sigkill_timeout, then kills), and a rank may get it
  // twice (from mpirun and from a scheduler that signals every process, sbatch --signal=USR2@N).
  struct sigaction again = sa;
  again.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &again, &g_old_usr2);
  g_installed = true;
}

PreemptionWatch::~PreemptionWatch() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGUSR2, &g_old_usr2, nullptr);
  g_installed = false;
}

bool PreemptionWatch::requested(Communicator* world, bool relayed) {
  int64_t mine = g_signal != 0 || relayed ? 1 : 0;
  if (!world) return mine != 0;
  world->all_reduce(&mine, 1, ElemType::i64, ReduceOp::sum, "the check for a stop signal");
  return mine != 0;
}

const char* PreemptionWatch::which() const {
  if (g_signal == SIGTERM) return "SIGTERM";
  if (g_signal == SIGINT) return "SIGINT";
  if (g_signal == SIGUSR2) return "SIGUSR2";
  return "a stop signal in another process";
}

}  // namespace pt
