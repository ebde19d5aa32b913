// ZeRO (Rajbhandari et al. 2020), the math: how the model's flat arena is
// partitioned over the data group. The partition unit is a "unit": the
// embeddings (wte, wpe), each transformer block, the final norm. The arena pads
// every unit to a multiple of dp, so each unit splits into dp equal slices and
// data rank r owns slice r of every unit; its shard is those slices, back to
// back. Equal slices make every reduce-scatter and all-gather a block
// collective, and a unit is also the granule stage 3 gathers before use.
// Units smaller than the persistence threshold are not partitioned at all.
// At stage 3 the token embedding is several units (UnitLayout::table_units),
// each made of dp row pieces strided through the table, piece r owned by rank
// r: a unit's gathered slot holds its pieces back to back.
#pragma once
#include <cstddef>
#include <vector>

#include "memory/tensor_table.hpp"

namespace trident {

struct ZeroUnit {
  UnitRange range;               // arena pieces (one, padded to a multiple of dp, or dp)
  std::size_t shard_offset = 0;  // where this rank's slice sits in its shard arena
  bool persistent = false;       // small: kept whole on every rank, all-reduced
  bool block = false;            // a transformer block (prefetched in order)
  bool embedding_table = false;  // a unit of the (tied) token embedding
  std::size_t begin() const { return range.begin; }
  std::size_t size() const { return range.size(); }
  bool cut() const { return range.pieces > 1; }  // pieces of a table, not one range
};

class ZeroPlan {
 public:
  ZeroPlan() = default;
  // Units follow TensorInfo::unit; the table must be built with unit_align = dp.
  ZeroPlan(const TensorTable& table, int dp, int dp_rank, std::size_t persistence_threshold);

  int dp() const { return dp_; }
  int rank() const { return rank_; }
  const std::vector<ZeroUnit>& units() const { return units_; }
  std::size_t slice(const ZeroUnit& u) const { return u.persistent ? u.size() : u.size() / dp_; }
  // Arena offset where this rank's slice of unit u starts.
  std::size_t slice_begin(const ZeroUnit& u) const { return slice_begin(u, rank_); }
  std::size_t slice_begin(const ZeroUnit& u, int rank) const {
    if (u.persistent) return u.begin();
    return u.begin() + std::size_t(rank) * (u.cut() ? u.range.stride : slice(u));
  }
  // Calls f(arena offset, offset in the packed unit, length) for each piece.
  template <class F> void for_each_piece(const ZeroUnit& u, F&& f) const {
    const std::size_t n = u.cut() ? u.range.piece : u.size();
    for (std::size_t p = 0, i = 0; i < u.size(); ++p, i += n) f(u.begin() + p * u.range.stride, i, n);
  }
  std::size_t shard_size() const { return shard_size_; }  // elements this rank owns
  std::size_t largest_unit() const;                       // elements, partitioned units
  int unit_of_offset(std::size_t arena_offset) const;

 private:
  int dp_ = 1, rank_ = 0;
  std::vector<ZeroUnit> units_;
  std::size_t shard_size_ = 0;
};

}  // namespace trident
