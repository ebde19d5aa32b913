// f32 working copies of units whose resident copy is 16-bit. The compute
// seam's kernels read f32 weights and accumulate f32 gradients, so a unit
// stored in bf16/fp16 is unpacked into a slot of this pool when the model
// announces it (need_params, need_grads) and the slot is recycled when its
// last user is done (a gradient copy is first rounded back). The pool
// is fixed when built, so memory is known before the run: a slot for the
// token embedding, one for a block and two for the small units (positions,
// final norm), the most the model holds at once: the tied head keeps the
// embedding and the final norm from forward to backward while the next
// micro-batch's positions and then blocks run (gpipe).
// The slots are working buffers, not model state: the ledger charges them to
// `buffers`, beside the 16-bit parameters or gradients they unpack.
// A resident token embedding that is one unit (stages 0-2, 16-bit weights)
// takes no slot: the model reads it d_model rows at a time, each block
// converted into a window of d_model x d_model, so no f32 copy grows with the
// vocabulary (the table is converted per use: forward's lookup and head, and
// the head's backward).
#pragma once
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "compute/backend.hpp"
#include "memory/arena.hpp"
#include "memory/ledger.hpp"
#include "memory/tensor_table.hpp"

namespace trident {

class WorkingCopies {
 public:
  WorkingCopies() = default;
  // For the units of `table` (TensorInfo::unit, as unit_ranges gives them);
  // `table_window`: the token embedding is read through window().
  WorkingCopies(ComputeBackend& backend, MemoryLedger& ledger, const TensorTable& table,
                bool table_window = false);
  // The slots' sizes in elements, the table's window first where there is one
  // (the estimator counts them too).
  static std::vector<std::size_t> slot_sizes(const TensorTable& table, bool table_window = false);
  // The token embedding can be read through a window: it is one unit.
  static bool can_window_table(const TensorTable& table);
  static std::size_t window_elements(const TensorTable& table);  // d_model rows at most

  // n elements of `bits` (of type `type`) converted into the window, which
  // the next call overwrites; window_back rounds them back into `bits`.
  float* window(const void* bits, DType type, std::size_t n);
  void window_back(void* bits, DType type, std::size_t n);

  // Counts a user of `unit` and returns its f32 copy; the first user's call
  // converts n elements of `bits` (of type `type`) into a free slot, less the
  // skipped ones.
  float* acquire(int unit, const void* bits, DType type, std::size_t n);
  // Elements [first, first + n) of unit's copy are never read (the model
  // reads that tensor as bf16 bits): acquire leaves them unconverted.
  void skip(int unit, std::size_t first, std::size_t n);
  bool skipped(int unit, std::size_t first) const;
  // As acquire, the first user's copy (n elements) written by fill(copy): a
  // unit whose resident elements are pieces, not one range.
  float* acquire_filled(int unit, std::size_t n, const std::function<void(float*)>& fill);
  float* find(int unit);   // the held copy, or null
  void release(int unit);  // after the last user the slot is free again
  // Rounds unit's copy back into `bits` (n elements of `type`), then releases it.
  void write_back_and_release(int unit, void* bits, DType type, std::size_t n);
  bool idle() const;       // no unit held (the resident copy may change)

 private:
  struct Slot {
    Arena mem;
    int unit = -1;
    int users = 0;
  };
  ComputeBackend* backend_ = nullptr;
  std::vector<Slot> slots_;
  std::map<int, std::vector<std::pair<std::size_t, std::size_t>>> skipped_;  // sorted per unit
  Arena window_;
};

}  // namespace trident
