#include "parallel/tensor/tensor_comm.hpp"

#include <cstring>

namespace trident {

void TensorComm::all_reduce(float* buf, std::size_t n) {
  if (active()) comm_->all_reduce(buf, n, DType::f32, ReduceOp::sum);
}

void TensorComm::gather_tokens(const float* local, float* full, std::size_t local_count) {
  if (active()) comm_->all_gather(local, full, local_count, DType::f32);
  else if (full != local) std::memcpy(full, local, local_count * sizeof(float));
}

void TensorComm::reduce_scatter_tokens(const float* full, float* local, std::size_t local_count) {
  if (active()) comm_->reduce_scatter(full, local, local_count, DType::f32, ReduceOp::sum);
  else if (full != local) std::memcpy(local, full, local_count * sizeof(float));
}

void TensorComm::max_over_vocab(float* row_max, std::size_t rows) {
  if (active()) comm_->all_reduce(row_max, rows, DType::f32, ReduceOp::max);
}

void TensorComm::sum_over_vocab(float* packed, std::size_t n) {
  if (active()) comm_->all_reduce(packed, n, DType::f32, ReduceOp::sum);
}

}  // namespace trident
