// Loading a checkpoint, data replica r reads the r-th part of the slices all
// replicas hold (cuts given per slice); this shares the parts over the data group,
// in the background of the reads that follow: sends of this rank's part to
// every other replica and receives of theirs, all directions at once, in
// messages of at most 4 MiB, posted a slice at a time while at most kInFlight
// transfers are outstanding. Every replica adds the same slices in the same
// order, so one tag matches them.
#pragma once
#include <cstddef>
#include <deque>
#include <vector>

#include "comm/communicator.hpp"
#include "grid/grid.hpp"
#include "checkpoint/tensor_slice.hpp"

namespace trident {

class ReplicaExchange {
 public:
  static constexpr std::size_t kInFlight = 64;
  static constexpr std::size_t kMessageBytes = std::size_t(4) << 20;
  explicit ReplicaExchange(Grid& grid) : grid_(grid) {}
  // Queues `whole`, whose part for this replica is in memory; replica r's
  // part is elements [cuts[r], cuts[r + 1]) of its range (dp + 1 cuts).
  void add(const TensorSlice& whole, std::size_t elem_bytes, std::vector<std::size_t> cuts);
  // Tests the transfers in flight and posts queued slices as room frees up.
  // Cheap: the reads call it between pieces.
  void progress();
  // Posts the rest and waits for everything; on every path out of a load,
  // also a failed one, since the peers' transfers depend on this rank's.
  void finish();
  bool empty() const { return queued_.empty() && pending_.empty(); }

 private:
  struct Shared {
    TensorSlice whole;
    std::size_t elem_bytes;
    std::vector<std::size_t> cuts;
  };
  void post(const Shared& s);

  Grid& grid_;
  std::deque<Shared> queued_;
  std::vector<Request> pending_;
};

}  // namespace trident
