#include "parallel/pipeline/weight_stash.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "checkpoint/checksum.hpp"

namespace trident {

WeightStash::WeightStash(ComputeBackend& backend, MemoryLedger& ledger, std::size_t numel,
                         int copies, DType dtype)
    : backend_(backend), owner_(std::size_t(std::max(copies, 0)), -1) {
  // Stashed versions are parameters: the ledger shows their cost there.
  for (int i = 0; i < copies; ++i)
    ring_.emplace_back(backend, ledger, MemCategory::parameters, numel, dtype);
}

void WeightStash::occupy(int g) {
  owner_[std::size_t(g) % ring_.size()] = g;
  occupied_ = int(std::count_if(owner_.begin(), owner_.end(), [](int o) { return o >= 0; }));
  peak_ = std::max(peak_, versions());
}

void WeightStash::keep(int g, const Arena& live) {
  if (ring_.empty() || !enabled_) return;
  backend_.copy(slot(g).data(), live.data(), live.bytes());
  occupy(g);
}

void WeightStash::swap_in(int g, Arena& live) {
  if (ring_.empty() || !enabled_) return;
  // Swapping the arenas moves no data: the model reads its weights through
  // the live arena, which now points at g's version.
  std::swap(live, slot(g));
  peak_ = std::max(peak_, versions());
}

void WeightStash::restore(int g, Arena& live) {
  if (ring_.empty() || !enabled_) return;
  std::swap(live, slot(g));  // the newest version is live again
  backend_.copy(slot(g).data(), live.data(), live.bytes());
  occupy(g + copies());
}

std::uint64_t arena_checksum(ComputeBackend& backend, const Arena& a) {
  std::vector<std::uint32_t> host(a.bytes() / 4);
  backend.copy_to_host(host.data(), a.data(), host.size() * 4);
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < host.size(); ++i) sum += checksum_element(i, host[i]);
  return sum;
}

}  // namespace trident
