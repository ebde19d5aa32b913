// PipeDream's weight stashing (Narayanan et al. 2019, section 3.3): a stage
// keeps the weight version each in-flight micro-batch's forward used, so its
// backward computes the gradient of the same function. The live parameter
// arena always holds the newest version (the one the next forward and the
// optimizer use); the stash is a ring of `copies` older versions in the same
// layout, slot g % copies for micro-batch g. A stage with k forwards running
// ahead holds k stashed copies plus the live weights: k + 1 versions, one per
// micro-batch in flight. The last stage runs no forward ahead and stashes none.
#pragma once
#include <cstdint>
#include <vector>

#include "memory/arena.hpp"

namespace trident {

class WeightStash {
 public:
  WeightStash(ComputeBackend& backend, MemoryLedger& ledger, std::size_t numel, int copies,
              DType dtype = DType::f32);

  int copies() const { return int(ring_.size()); }
  // Forward of g on weights that will change before its backward while no
  // later forward's version takes its slot (the warm-up): keep a copy.
  void keep(int g, const Arena& live);
  // Before the backward of g: `live` becomes g's version; g's slot holds the
  // newest version meanwhile.
  void swap_in(int g, Arena& live);
  // After the backward of g: `live` is the newest version again, and the slot
  // keeps it too, as the version of forward g + copies, which ran on it.
  void restore(int g, Arena& live);
  // Versions held at once (live + occupied slots): now, and the most so far.
  int versions() const { return 1 + occupied_; }
  int peak_versions() const { return peak_; }
  // Tests: with the stash off, backwards run on the newest weights (what
  // PipeDream without stashing would do); nothing is copied.
  void set_enabled(bool on) { enabled_ = on; }

 private:
  Arena& slot(int g) { return ring_[std::size_t(g) % ring_.size()]; }
  void occupy(int g);
  ComputeBackend& backend_;
  std::vector<Arena> ring_;
  std::vector<int> owner_;  // per slot: the micro-batch whose version it holds, or -1
  int occupied_ = 0, peak_ = 1;
  bool enabled_ = true;
};

// Layout-free checksum of an arena's raw contents (tests: which weights a
// pass saw).
std::uint64_t arena_checksum(ComputeBackend& backend, const Arena& a);

}  // namespace trident
