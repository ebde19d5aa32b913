#include "parallel/data/grad_buckets.hpp"

namespace trident {

std::vector<GradBucket> plan_grad_buckets(const TensorTable& table, std::size_t cap_bytes,
                                          std::size_t elem_bytes) {
  const std::size_t cap = std::max<std::size_t>(1, cap_bytes / elem_bytes);
  const auto& ts = table.tensors();
  std::vector<GradBucket> out;
  std::size_t end = table.size();
  std::size_t begin = end;
  for (std::size_t i = ts.size(); i-- > 0;) {
    // Extend the open bucket down to tensor i's start (the first tensor
    // starts the arena).
    const std::size_t lo = i == 0 ? 0 : ts[i].offset;
    if (begin != end && end - lo > cap) {  // would overflow: close the bucket
      out.push_back({begin, end});
      end = begin;
    }
    begin = lo;
  }
  if (begin != end || out.empty()) out.push_back({0, end});
  return out;
}

std::vector<std::size_t> BucketReadiness::mark_ready_from(std::size_t first_ready) {
  std::vector<std::size_t> now;
  while (next_ < buckets_.size() && buckets_[next_].begin >= first_ready) now.push_back(next_++);
  return now;
}

}  // namespace trident
