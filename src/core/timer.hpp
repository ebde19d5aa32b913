// Wall-clock helpers for per-phase timers.
#pragma once
#include <chrono>
#include <ctime>

namespace trident {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// CPU time the calling thread has used (user and system): what a helper
// thread takes from training where every core computes.
inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Adds the lifetime of the scope to `acc` (seconds).
class ScopedTimer {
 public:
  explicit ScopedTimer(double& acc) : acc_(acc), start_(now_seconds()) {}
  ~ScopedTimer() { acc_ += now_seconds() - start_; }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double& acc_;
  double start_;
};

}  // namespace trident
