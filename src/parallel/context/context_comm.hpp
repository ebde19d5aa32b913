// The only place context parallelism talks to the network: blocks passed one
// step around the ring of a context group (to the next rank, from the
// previous), nonblocking, so the next block travels while this one computes.
#pragma once
#include <cstddef>

#include "comm/communicator.hpp"

namespace trident {

class ContextComm {
 public:
  // Tags of the ring's two streams: keys and values forward, their gradients
  // behind them (both can be in flight between the same pair of ranks).
  static constexpr int kKeysValues = 0, kKeyValueGrads = 1;

  explicit ContextComm(Communicator& ring) : ring_(ring) {}
  int rank() const { return ring_.rank(); }
  int size() const { return ring_.size(); }

  // One step of the ring in flight: count floats of `send` to the next rank,
  // the previous rank's into `recv`.
  struct Shift {
    Request send, recv;
  };
  Shift start_shift(const float* send, float* recv, std::size_t count, int tag);
  void finish(Shift& s);

 private:
  Communicator& ring_;
};

}  // namespace trident
