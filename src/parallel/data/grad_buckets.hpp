// Gradient buckets for data parallelism (the math; collectives are in
// data_comm). Buckets are contiguous ranges of the gradient arena, cut at
// tensor boundaries and filled from the end of the arena, because backward
// finishes gradients back to front: a bucket can be reduced as soon as the
// layers it covers are done, overlapping communication with the rest of
// backward (as PyTorch DDP does, ~25 MB per bucket by default).
#pragma once
#include <cstddef>
#include <vector>

#include "memory/tensor_table.hpp"

namespace trident {

struct GradBucket {
  std::size_t begin = 0;  // element range [begin, end) of the arena
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
};

// Buckets in launch order (the last bucket of the arena first). Each holds at
// least one tensor; a tensor is never split. The alignment padding after a
// tensor goes with that tensor, so the buckets tile [0, table.size()).
std::vector<GradBucket> plan_grad_buckets(const TensorTable& table, std::size_t cap_bytes,
                                          std::size_t elem_bytes = 4);

// Tracks which buckets became ready as backward reports progress.
class BucketReadiness {
 public:
  explicit BucketReadiness(const std::vector<GradBucket>& buckets) : buckets_(buckets) {}
  void reset() { next_ = 0; }
  // Everything at or after `first_ready` is final: returns the indices of
  // buckets that became complete with this report, in launch order.
  std::vector<std::size_t> mark_ready_from(std::size_t first_ready);
  bool all_ready() const { return next_ == buckets_.size(); }

 private:
  const std::vector<GradBucket>& buckets_;
  std::size_t next_ = 0;
};

}  // namespace trident
