#include "parallel/zero/zero_plan.hpp"

#include <stdexcept>

namespace trident {

ZeroPlan::ZeroPlan(const TensorTable& table, int dp, int dp_rank, std::size_t threshold)
    : dp_(dp), rank_(dp_rank) {
  // Group consecutive tensors by unit key: embeddings (-1 before any block),
  // blocks, final norm (-1 after). A unit ends where the next one starts.
  std::vector<std::size_t> starts;
  int prev_key = -2;
  bool seen_block = false;
  for (const TensorInfo& t : table.tensors()) {
    if (t.layer >= 0) seen_block = true;
    const int key = t.layer >= 0 ? t.layer : (seen_block ? 1 << 30 : -1);
    if (key != prev_key) starts.push_back(t.offset), prev_key = key;
  }
  starts.push_back(table.size());
  for (std::size_t i = 0; i + 1 < starts.size(); ++i) {
    ZeroUnit u;
    u.begin = i == 0 ? 0 : starts[i];
    u.end = starts[i + 1];
    if (u.size() % dp != 0) throw std::logic_error("ZeRO unit not padded to a multiple of dp");
    u.persistent = u.size() < threshold;
    u.shard_offset = shard_size_;
    shard_size_ += slice(u);
    units_.push_back(u);
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
    if (off >= units_[i].begin && off < units_[i].end) return int(i);
  return -1;
}

}  // namespace trident
