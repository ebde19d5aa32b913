// A table of named tensors laid out in one flat buffer (offsets in elements).
// Parameters, gradients and optimizer moments share one table, so sharding,
// collectives and file I/O are slicing of a flat range.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace trident {

// One named tensor of an arena. The global tensor (every layout's common view,
// used by initialisation and checkpoints) has global_shape; this rank holds
// the shard `shape`. Along split_dim the shard covers global indices
// [shard_rank * shape[split_dim], (shard_rank + 1) * shape[split_dim]) clipped
// to global_shape[split_dim]: indices past the global extent are padding (e.g.
// the vocabulary padded to a multiple of tp), zero and never saved.
struct TensorInfo {
  std::string name;                        // "h.3.attn.qkv.w" (PyTorch-style)
  std::vector<std::int64_t> shape;         // local shape on this rank, padding included
  std::vector<std::int64_t> global_shape;  // shape in the global model, no padding
  int split_dim = -1;                      // dim split across the tensor group; -1: whole
  int shard_rank = 0;                      // this rank's shard index along split_dim
  // Where split_dim (then 0) is pieces of different extents each split over
  // the group (grouped-query attention's fused [q | k | v] rows): their
  // global extents, and each rank holds its slice of each, in order. Empty:
  // one piece (and then padding may follow the global extent).
  std::vector<std::int64_t> segments;
  int layer = -1;                          // transformer block index, -1 for the rest
  int unit = 0;  // partition unit (ZeRO slices and gathers whole units): a block, or one
                 // of the embedding table, position table and final norm
  // A tensor too big to be one unit (ZeRO-3's token embedding) is cut into
  // `pieces` equal pieces of `piece` elements (whole rows), dealt round-robin
  // to units [unit, unit + units): piece j lies in unit `unit + j % units`.
  int units = 1, pieces = 1;
  std::size_t piece = 0;
  bool weight_decay = false;               // AdamW decays matrices, not biases or norms
  bool primary = true;  // false for a second copy of a tensor kept elsewhere too (e.g. the
                        // tied embedding on the last pipeline stage): never saved from here
  std::size_t offset = 0;                  // elements from the start of the arena
  std::size_t numel = 0;

  // Global flat index of local element i, or -1 for padding.
  std::int64_t global_index(std::size_t i) const;
  // The global index along split_dim of local index `local` there, or -1 for padding.
  std::int64_t global_split_index(std::int64_t local) const;
  // Local indices along split_dim from `local` that stay in one segment (all
  // to the end of the shard without segments).
  std::int64_t segment_run(std::int64_t local) const;
};

class TensorTable {
 public:
  // Elements each tensor's offset is rounded up to (64 bytes of f32): keeps
  // every tensor cache-line and vector aligned. Padding is counted as memory.
  static constexpr std::size_t kAlign = 16;

  const TensorInfo& add(TensorInfo info);
  const TensorInfo& at(const std::string& name) const;
  const TensorInfo* find(const std::string& name) const;
  // Name lookups (at and find) this thread has made, over every table: the
  // model resolves its handles once, and a test checks a step makes none.
  static std::uint64_t lookups();
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  TensorInfo& last() { return tensors_.back(); }  // the one just added, to annotate
  std::size_t size() const { return end_; }  // elements, padding included
  // Pads the end to a multiple of `multiple` elements (the next tensor, or the
  // arena's end, starts there): ZeRO makes each unit divisible by dp this way.
  void align_end(std::size_t multiple) { end_ = (end_ + multiple - 1) / multiple * multiple; }
  void pad_end_to(std::size_t end) { end_ = std::max(end_, end); }
  std::size_t numel() const { return numel_; }  // elements, padding excluded

 private:
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, std::size_t> index_;
  std::size_t end_ = 0;
  std::size_t numel_ = 0;
};

// The arena range of each partition unit (TensorInfo::unit), in unit order:
// a unit runs from its first tensor to the next unit's first tensor (the
// first from 0, the last to the table's end), so the ranges tile the arena.
// A unit of a cut tensor is `pieces` ranges of `piece` elements, `stride`
// apart; a plain unit is one piece.
struct UnitRange {
  std::size_t begin = 0, piece = 0, stride = 0;
  std::size_t pieces = 1;
  std::size_t size() const { return piece * pieces; }
  // Where arena element `off` sits in the unit packed piece after piece, or
  // npos when the unit does not hold it.
  std::size_t packed_index(std::size_t off) const {
    if (off < begin) return npos;
    const std::size_t d = off - begin, p = d / stride, r = d % stride;
    return p < pieces && r < piece ? p * piece + r : npos;
  }
  static constexpr std::size_t npos = std::size_t(-1);
};
std::vector<UnitRange> unit_ranges(const TensorTable& table);

}  // namespace trident
