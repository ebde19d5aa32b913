// Where a checkpoint write or read spends its time: seconds per named phase on
// this rank, in first-seen order. Cheap enough to keep on always (a clock read
// per phase); perf/bench_checkpoint --phases prints them.
#pragma once
#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "core/timer.hpp"

namespace trident {

class IoPhases {
 public:
  void add(const std::string& phase, double seconds) {
    for (auto& [name, total] : phases_)
      if (name == phase) return void(total += seconds);
    phases_.emplace_back(phase, seconds);
  }
  // Runs fn() and charges its time to `phase`.
  template <class Fn>
  decltype(auto) time(const std::string& phase, Fn&& fn) {
    struct Charge {
      IoPhases& to;
      const std::string& phase;
      double start = now_seconds();
      ~Charge() { to.add(phase, now_seconds() - start); }
    } charge{*this, phase};
    return fn();
  }
  std::string summary() const {  // "create 0.01 s, write 0.80 s, ..."
    std::string out;
    for (const auto& [name, s] : phases_) out += fmt::format("{}{} {:.3f} s", out.empty() ? "" : ", ", name, s);
    return out;
  }

 private:
  std::vector<std::pair<std::string, double>> phases_;
};

}  // namespace trident
