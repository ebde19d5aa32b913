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
#pragma once
#include <functional>
#include <vector>

#include "compute/backend.hpp"
#include "memory/arena.hpp"
#include "memory/ledger.hpp"
#include "memory/tensor_table.hpp"

namespace trident {

class WorkingCopies {
 public:
  WorkingCopies() = default;
  // For the units of `table` (TensorInfo::unit, as unit_ranges gives them).
  WorkingCopies(ComputeBackend& backend, MemoryLedger& ledger, const TensorTable& table);
  // The slots' sizes in elements (the estimator counts them too).
  static std::vector<std::size_t> slot_sizes(const TensorTable& table);

  // Counts a user of `unit` and returns its f32 copy; the first user's call
  // converts n elements of `bits` (of type `type`) into a free slot.
  float* acquire(int unit, const void* bits, DType type, std::size_t n);
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
};

}  // namespace trident
