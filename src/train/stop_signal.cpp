#include "train/stop_signal.hpp"

#include <pthread.h>

#include <atomic>
#include <thread>

namespace trident {
namespace {

// Process-wide by nature: a signal reaches the process, not an object.
std::atomic<int> g_stop_signal{0};
std::atomic<int> g_guards{0};
std::atomic<bool> g_watching{false};

constexpr int kSignals[2] = {SIGUSR1, SIGTERM};

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kSignals) sigaddset(&set, s);
  return set;
}

void watch(sigset_t set) {
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (g_guards.load() > 0) {
      g_stop_signal.store(sig);
      continue;
    }
    // Nothing listens: the default action (termination), taken on this thread.
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, nullptr);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    raise(sig);
  }
}

// Where nothing watches (a test's own main): the flag set by a handler.
extern "C" void on_stop_signal(int signum) { g_stop_signal.store(signum); }

}  // namespace

void watch_stop_signals() {
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(watch, set).detach();
  g_watching.store(true);
}

StopSignalGuard::StopSignalGuard() {
  g_stop_signal.store(0);
  ++g_guards;
  if (g_watching.load()) return;
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // system calls in flight (file I/O, MPI) carry on
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &sa, &previous_[i]);
}

StopSignalGuard::~StopSignalGuard() {
  --g_guards;
  if (g_watching.load()) return;
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &previous_[i], nullptr);
}

int StopSignalGuard::received() { return g_stop_signal.load(); }

const char* signal_name(int signum) {
  switch (signum) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace trident
