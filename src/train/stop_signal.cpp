#include "train/stop_signal.hpp"

#include <csignal>

namespace trident {
namespace {

// A signal handler can only reach process-wide state: this flag is the one
// global of the program, written only by the handler.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signum) { g_stop_signal = signum; }

constexpr int kSignals[2] = {SIGUSR1, SIGTERM};

}  // namespace

StopSignalGuard::StopSignalGuard() {
  g_stop_signal = 0;
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // system calls in flight (file I/O, MPI) carry on
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &sa, &previous_[i]);
}

StopSignalGuard::~StopSignalGuard() {
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &previous_[i], nullptr);
}

int StopSignalGuard::received() { return g_stop_signal; }

const char* signal_name(int signum) {
  switch (signum) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace trident
