// A wait that gives up only when nothing moves: the background writers' own
// timeout (system.comm_timeout_s), counted from their last progress, so a
// slow disk is waited for and a stuck one is reported.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace trident {

// Waits on `changed` (lock held) until done(); false when progress() stood
// still for timeout_s. Looks at the clock every 50 ms.
template <class Progress, class Done>
bool wait_while_progressing(std::unique_lock<std::mutex>& lock, std::condition_variable& changed,
                            Progress progress, Done done, double timeout_s) {
  using clock = std::chrono::steady_clock;
  auto seen = progress();
  auto since = clock::now();
  while (!done()) {
    changed.wait_for(lock, std::chrono::milliseconds(50));
    const auto now = clock::now();
    if (progress() != seen) {
      seen = progress(), since = now;
    } else if (std::chrono::duration<double>(now - since).count() > timeout_s) {
      return false;
    }
  }
  return true;
}

}  // namespace trident
