#include "parallel/zero/zero_comm.hpp"

namespace trident {

Request ZeroComm::reduce_unit(const ZeroUnit& u, float* full, float* slice) {
  if (u.persistent) return data_.iall_reduce(full, u.size(), DType::f32, ReduceOp::sum);
  return data_.ireduce_scatter(full, slice, plan_.slice(u), DType::f32, ReduceOp::sum);
}

Request ZeroComm::gather_unit(const ZeroUnit& u, const void* slice, void* full, DType t) {
  return data_.iall_gather(slice, full, plan_.slice(u), t);
}

}  // namespace trident
