// The only place tensor parallelism talks to the network. Each function is
// one of Megatron's conjugate operators or a step of the vocab-parallel loss;
// with one tensor rank they do nothing (or copy).
#pragma once
#include <cstddef>

#include "comm/communicator.hpp"
#include "parallel/tensor/tensor_layout.hpp"

namespace trident {

class TensorComm {
 public:
  TensorComm(Communicator* tensor, const TensorParallelLayout& layout)
      : comm_(tensor), layout_(layout) {}
  bool active() const { return comm_ && layout_.size > 1; }

  // Sum partial results over the tensor group, in place: `g` in forward after a
  // row-parallel layer, `f` in backward before a column-parallel one.
  void all_reduce(float* buf, std::size_t n);
  // Sequence parallel: local tokens -> all tokens (rank order), and the
  // reverse with a sum; each moves `local` elements per rank.
  void gather_tokens(const float* local, float* full, std::size_t local_count);
  void reduce_scatter_tokens(const float* full, float* local, std::size_t local_count);
  // Vocab-parallel softmax statistics: the row maxima (max), then the packed
  // [sum of exp, target logit] pairs (sum).
  void max_over_vocab(float* row_max, std::size_t rows);
  void sum_over_vocab(float* packed, std::size_t n);

 private:
  Communicator* comm_;
  TensorParallelLayout layout_;
};

}  // namespace trident
