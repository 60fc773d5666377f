#include "engine/process/signal_thread.h"

#include <pthread.h>
#include <signal.h>

#include <thread>

namespace pt {

namespace {

sigset_t routed_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  return set;
}

// Runs what the kernel would have run for `sig`: the installed handler, or the default action.
void deliver(int sig) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  const bool with_info = (now.sa_flags & SA_SIGINFO) != 0;
  if (!with_info && now.sa_handler == SIG_IGN) return;
  if (with_info || now.sa_handler != SIG_DFL) {
    if (now.sa_flags & SA_RESETHAND) {  // one-shot, as the kernel does it
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      sigaction(sig, &dfl, nullptr);
    }
    if (with_info) {
      siginfo_t info{};
      info.si_signo = sig;
      now.sa_sigaction(sig, &info, nullptr);
    } else {
      now.sa_handler(sig);
    }
    return;
  }
  // The default action of all four is to end the process: let the kernel do it, with the
  // signal, on this thread.
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);
}

}  // namespace

void route_signals_to_a_thread() {
  static bool started = false;
  if (started) return;
  started = true;
  const sigset_t set = routed_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) == 0) deliver(sig);
    }
  }).detach();
}

}  // namespace pt
