// Optimizer post-validation (Qi et al., ICLR 2024, section 4) made exact: a
// copy of everything an optimizer step writes, taken before a step that runs
// ahead of the global gradient norm and overflow check, so that a step they
// say should have been clipped or skipped is undone bit for bit and redone.
// Inverting AdamW is not exact in floating point; a copy is. It costs the
// bytes of the arenas it covers once more (parameters, moments, masters).
#pragma once
#include <cstdint>
#include <vector>

#include "memory/arena.hpp"

namespace trident {

class StepSnapshot {
 public:
  StepSnapshot() = default;
  // The arenas a step writes (nulls are skipped); the copies are allocated
  // now, as optimizer memory.
  StepSnapshot(ComputeBackend& backend, MemoryLedger& ledger, const std::vector<Arena*>& sources);

  void save(std::int64_t steps_taken);  // every source (the rest of one begun), and the step count
  // At most `bytes` more of the copy; true once it is whole. The sources must
  // not change between the parts.
  bool save_part(std::int64_t steps_taken, std::size_t bytes);
  void drop_part() { next_source_ = next_byte_ = 0; }
  std::int64_t restore();               // every source as saved; returns the step count
  std::size_t bytes() const;

 private:
  ComputeBackend* backend_ = nullptr;
  std::vector<Arena*> sources_;
  std::vector<Arena> copies_;
  std::int64_t steps_taken_ = 0;
  std::size_t next_source_ = 0, next_byte_ = 0;  // where a copy in parts goes on
};

}  // namespace trident
