// The only place ZeRO talks to the network: a unit's gradients are
// reduce-scattered into the owners' slices (or all-reduced when the unit is
// persistent), and a unit's parameters are all-gathered from the slices.
#pragma once
#include "comm/communicator.hpp"
#include "parallel/zero/zero_plan.hpp"

namespace trident {

class ZeroComm {
 public:
  ZeroComm(Communicator& data, const ZeroPlan& plan) : data_(data), plan_(plan) {}
  // full: the unit's u.size() gradients (of type t); slice: receives this
  // rank's summed slice (a persistent unit is summed in place in `full`).
  Request reduce_unit(const ZeroUnit& u, void* full, void* slice, DType t = DType::f32);
  // slice: this rank's u.size()/dp parameters (of type t); full: receives the
  // whole unit. `slice` may be full's own slot for this rank (in place).
  Request gather_unit(const ZeroUnit& u, const void* slice, void* full, DType t = DType::f32);
  void wait(Request& r) { data_.wait(r); }
  bool test(Request& r) { return data_.test(r); }
  Communicator& group() { return data_; }

 private:
  Communicator& data_;
  const ZeroPlan& plan_;
};

}  // namespace trident
