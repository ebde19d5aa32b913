#include "parallel/zero/zero_comm.hpp"

namespace trident {

Request ZeroComm::reduce_unit(const ZeroUnit& u, float* full, float* slice) {
  if (u.persistent) return data_.iall_reduce(full, u.size(), DType::f32, ReduceOp::sum);
  return data_.ireduce_scatter(full, slice, plan_.slice(u), DType::f32, ReduceOp::sum);
}

Request ZeroComm::gather_unit(const ZeroUnit& u, const float* slice, float* full) {
  return data_.iall_gather(slice, full, plan_.slice(u), DType::f32);
}

}  // namespace trident
