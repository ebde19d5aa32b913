// Wall-clock helpers for per-phase timers.
#pragma once
#include <chrono>

namespace trident {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
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
