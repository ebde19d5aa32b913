#include "train/replica_exchange.hpp"

#include <algorithm>

#include "train/checkpoint_state.hpp"

namespace trident {

namespace {
constexpr int kTag = 7;
}

void ReplicaExchange::add(const TensorSlice& whole, std::size_t elem_bytes) {
  queued_.emplace_back(whole, elem_bytes);
}

void ReplicaExchange::post(const TensorSlice& whole, std::size_t esz) {
  Communicator& data = grid_.data();
  const int dp = data.size(), me = data.rank();  // data rank = the dp coordinate
  const DType type = esz == 2 ? DType::u16 : DType::f32;
  for (int r = 0; r < dp; ++r) {
    GridCoord c = grid_.coord();
    c.dp = r;
    const TensorSlice part = replica_part(whole, c, dp, esz);
    // In messages of at most kMessageBytes: a message is copied whole inside
    // one progress() call, which the reads make between their pieces.
    const std::size_t per_message = kMessageBytes / esz;
    for (std::size_t lo = part.lo; lo < part.hi; lo += per_message) {
      char* at = static_cast<char*>(part.data) + (lo - part.lo) * esz;
      const std::size_t n = std::min(per_message, part.hi - lo);
      if (r != me) {
        pending_.push_back(data.irecv(at, n, type, r, kTag));
        continue;
      }
      for (int q = 0; q < dp; ++q)
        if (q != me) pending_.push_back(data.isend(at, n, type, q, kTag));
    }
  }
}

void ReplicaExchange::progress() {
  Communicator& data = grid_.data();
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](Request& r) { return data.test(r); }),
                 pending_.end());
  // A slice's sends go out with its receives, so no replica waits on a part
  // its peer has not offered.
  while (!queued_.empty() && pending_.size() < kInFlight) {
    post(queued_.front().first, queued_.front().second);
    queued_.pop_front();
  }
}

void ReplicaExchange::finish() {
  while (!empty()) {
    progress();
    if (pending_.empty()) continue;
    grid_.data().wait(pending_.front());
    pending_.erase(pending_.begin());
  }
}

}  // namespace trident
