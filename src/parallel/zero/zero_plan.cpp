#include "parallel/zero/zero_plan.hpp"

#include <stdexcept>

namespace trident {

ZeroPlan::ZeroPlan(const TensorTable& table, int dp, int dp_rank, std::size_t threshold)
    : dp_(dp), rank_(dp_rank) {
  for (const UnitRange& r : unit_ranges(table)) {
    ZeroUnit u;
    u.range = r;
    units_.push_back(u);
  }
  for (const TensorInfo& t : table.tensors()) {
    units_[t.unit].block = t.layer >= 0;
    for (int k = 0; k < t.units; ++k)
      units_[t.unit + k].embedding_table = units_[t.unit + k].embedding_table || t.name == "wte";
  }
  for (auto& u : units_) {
    if (u.size() % dp != 0 || (u.cut() && int(u.range.pieces) != dp))
      throw std::logic_error("ZeRO unit not padded to a multiple of dp");
    u.persistent = !u.cut() && u.size() < threshold;  // a table's pieces are always sharded
    u.shard_offset = shard_size_;
    shard_size_ += slice(u);
  }
}

std::size_t ZeroPlan::largest_unit() const {
  std::size_t m = 0;
  for (const auto& u : units_)
    if (!u.persistent) m = std::max(m, u.size());
  return m;
}

int ZeroPlan::unit_of_offset(std::size_t off) const {
  for (std::size_t i = 0; i < units_.size(); ++i)
    if (units_[i].range.packed_index(off) != UnitRange::npos) return int(i);
  return -1;
}

}  // namespace trident
