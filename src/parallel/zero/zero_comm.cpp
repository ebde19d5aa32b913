#include "parallel/zero/zero_comm.hpp"

namespace trident {

Request ZeroComm::reduce_unit(const ZeroUnit& u, void* full, void* slice, DType t) {
  if (data_.size() == 1) return {};  // the sum over one rank is `full` itself (slice == full)
  if (u.persistent) return data_.iall_reduce(full, u.size(), t, ReduceOp::sum);
  return data_.ireduce_scatter(full, slice, plan_.slice(u), t, ReduceOp::sum);
}

Request ZeroComm::gather_unit(const ZeroUnit& u, const void* slice, void* full, DType t) {
  return data_.iall_gather(slice, full, plan_.slice(u), t);
}

}  // namespace trident
