// Batch systems ask a job to stop with a signal: Slurm sends SIGTERM at the
// time limit (or SIGUSR1 earlier with --signal=USR1@120), mpirun forwards
// SIGUSR1. While a StopSignalGuard lives, those signals only set a flag
// (async-signal-safe); training polls it at step boundaries, checkpoints and
// exits cleanly.
#pragma once
#include <csignal>

namespace trident {

class StopSignalGuard {
 public:
  StopSignalGuard();   // installs the handlers for SIGUSR1 and SIGTERM
  ~StopSignalGuard();  // restores the previous ones
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;

  // The last stop signal received (0: none).
  static int received();

 private:
  struct sigaction previous_[2];
};

const char* signal_name(int signum);  // "SIGUSR1"

}  // namespace trident
