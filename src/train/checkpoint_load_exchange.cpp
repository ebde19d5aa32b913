#include "train/checkpoint_load_exchange.hpp"

#include <algorithm>


namespace trident {

namespace {
constexpr int kTag = 7;
}

void ReplicaExchange::add(const TensorSlice& whole, std::size_t elem_bytes,
                          std::vector<std::size_t> cuts) {
  queued_.push_back({whole, elem_bytes, std::move(cuts)});
}

void ReplicaExchange::post(const Shared& s) {
  Communicator& data = grid_.data_context();
  const int dp = data.size(), me = data.rank();  // the replica index (data x context)
  const std::size_t esz = s.elem_bytes;
  const DType type = esz == 2 ? DType::u16 : DType::f32;
  // In messages of at most kMessageBytes: a message is copied whole inside
  // one progress() call, which the reads make between their pieces.
  const std::size_t per_message = kMessageBytes / esz;
  for (int r = 0; r < dp; ++r)
    for (std::size_t lo = s.cuts[r]; lo < s.cuts[r + 1]; lo += per_message) {
      char* at = static_cast<char*>(s.whole.data) + lo * esz;
      const std::size_t n = std::min(per_message, s.cuts[r + 1] - lo);
      if (r != me) {
        pending_.push_back(data.irecv(at, n, type, r, kTag));
        continue;
      }
      for (int q = 0; q < dp; ++q)
        if (q != me) pending_.push_back(data.isend(at, n, type, q, kTag));
    }
}

void ReplicaExchange::progress() {
  Communicator& data = grid_.data_context();
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](Request& r) { return data.test(r); }),
                 pending_.end());
  // A slice's sends go out with its receives, so no replica waits on a part
  // its peer has not offered.
  while (!queued_.empty() && pending_.size() < kInFlight) {
    post(queued_.front());
    queued_.pop_front();
  }
}

void ReplicaExchange::finish() {
  while (!empty()) {
    progress();
    if (pending_.empty()) continue;
    grid_.data_context().wait(pending_.front());
    pending_.erase(pending_.begin());
  }
}

}  // namespace trident
