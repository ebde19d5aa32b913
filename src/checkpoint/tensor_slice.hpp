// Which elements of a global tensor one rank holds, and where they sit in the
// global tensor. A rank holds a shard (TensorInfo: split along split_dim, maybe
// padded past the global extent) and, of its flattened shard, the contiguous
// range [lo, hi): the whole shard, or a ZeRO partition of it. That range is a
// union of at most 2*rank - 1 boxes of the shard (a partial first row, whole
// rows, a partial last row, recursively); shifted along split_dim and clipped
// to the global extent they are boxes of the global tensor, padding left out.
// Checkpoint files are written and read box by box, in this order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "memory/tensor_table.hpp"

namespace trident {

// This rank's part of one global tensor, as checkpoints see it.
struct TensorSlice {
  const TensorInfo* shard = nullptr;  // layout of this rank's shard; null: holds none
  std::size_t lo = 0, hi = 0;         // flat range of the shard held at `data`
  void* data = nullptr;               // element lo; hi - lo elements, padding included
  // This copy is the one written and checksummed: over all ranks, exactly one
  // counted slice covers each element (one replica, one tensor rank, the
  // primary copy). Uncounted slices are still read into on load.
  bool counted = false;

  bool empty() const { return shard == nullptr || data == nullptr || lo >= hi; }
};

// The whole shard of `t` at `data` (lo = 0, hi = numel).
TensorSlice whole_shard(const TensorInfo& t, void* data, bool counted);

struct SliceBox {
  std::vector<std::int64_t> local_start;   // first element, in shard coordinates
  std::vector<std::int64_t> global_start;  // the same element in the global tensor
  std::vector<std::int64_t> count;         // extent per dimension (all >= 1)
  std::int64_t numel() const;
};

// Boxes covering the non-padding elements of [lo, hi) of the flattened shard,
// in flat order. Concatenated, their elements (row-major within each box) are
// the range's elements in order with the padding removed.
std::vector<SliceBox> slice_boxes(const TensorInfo& shard, std::size_t lo, std::size_t hi);

// Runs of a box contiguous in both the shard and the global tensor:
// fn(local_flat, global_flat, length) for each, in order.
using RunFn = std::function<void(std::size_t, std::uint64_t, std::size_t)>;
void for_each_run(const TensorInfo& shard, const SliceBox& box, const RunFn& fn);

// Elements the boxes cover (the range minus its padding).
std::size_t boxes_numel(const std::vector<SliceBox>& boxes);

// Elements [lo, hi) of the slice (within its range), as a slice of their own.
TensorSlice sub_slice(const TensorSlice& s, std::size_t lo, std::size_t hi, std::size_t elem_bytes);

// Elements [lo, hi) of a slice's range holding global elements [first, ...)
// in order: one range of the file.
struct FileRun {
  std::size_t lo = 0, hi = 0;
  std::uint64_t first = 0;
};
// When the slice's elements other than padding are one contiguous run of its
// global tensor (a row-split shard, a ZeRO range; padding only before or
// after them), that run.
std::optional<FileRun> contiguous_run(const TensorSlice& s);

// The range [lo, hi) of a slice cut into pieces of at most piece_bytes for
// I/O, in order. When the range is one contiguous run of the global tensor
// (a whole row-split shard, a ZeRO range), the cuts fall on multiples of
// piece_bytes in the file, given where the tensor's bytes start there.
std::vector<std::pair<std::size_t, std::size_t>> slice_pieces(const TensorSlice& s,
                                                              std::size_t elem_bytes,
                                                              std::uint64_t file_offset,
                                                              std::size_t piece_bytes);

// Between a slice's memory (hi - lo elements, padding included) and a packed
// buffer holding only the covered elements in order. Unpacking zeroes padding.
void pack_slice(const TensorSlice& s, const std::vector<SliceBox>& boxes, std::size_t elem_bytes,
                void* packed);
void unpack_slice(const TensorSlice& s, const std::vector<SliceBox>& boxes,
                  std::size_t elem_bytes, const void* packed);

}  // namespace trident
