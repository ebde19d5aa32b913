// Batch systems ask a job to stop with a signal: Slurm sends SIGTERM at the
// time limit (or SIGUSR1 earlier with --signal=USR1@120), mpirun forwards
// SIGUSR1. While a StopSignalGuard lives, those signals only set a flag;
// training polls it at step boundaries, checkpoints and exits cleanly.
#pragma once
#include <csignal>

namespace trident {

// Called first in main, before any thread exists: blocks SIGUSR1 and SIGTERM
// in every thread the process will make and receives them on one thread of
// their own (sigwait), so no compute or MPI thread ever has a call
// interrupted by them (a signal arriving inside Open MPI's shared-memory
// transfers was seen to corrupt memory). Without a StopSignalGuard alive a
// signal takes its default action, as if nothing were watching.
void watch_stop_signals();

class StopSignalGuard {
 public:
  StopSignalGuard();   // from now on the signals set the flag
  ~StopSignalGuard();  // and no longer
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;

  // The last stop signal received (0: none).
  static int received();

 private:
  struct sigaction previous_[2];  // the handlers replaced where nothing watches
};

const char* signal_name(int signum);  // "SIGUSR1"

}  // namespace trident
