// The only place tensor parallelism talks to the network: the model's tensor
// group operations (model/tensor_group.hpp) over the tensor communicator. Each
// is one of Megatron's conjugate operators or a step of the vocab-parallel
// loss; with one tensor rank they do nothing (or copy).
#pragma once
#include <cstddef>

#include "comm/communicator.hpp"
#include "model/tensor_group.hpp"
#include "parallel/tensor/tensor_layout.hpp"

namespace trident {

class TensorComm final : public TensorGroupOps {
 public:
  TensorComm(Communicator* tensor, const TensorParallelLayout& layout)
      : comm_(tensor), layout_(layout) {}
  bool active() const { return comm_ && layout_.size > 1; }

  // `g` in forward after a row-parallel layer, `f` in backward before a
  // column-parallel one.
  void all_reduce(float* buf, std::size_t n) override;
  void gather_tokens(const float* local, float* full, std::size_t local_count) override;
  void reduce_scatter_tokens(const float* full, float* local, std::size_t local_count) override;
  void max_over_vocab(float* row_max, std::size_t rows) override;
  void sum_over_vocab(float* packed, std::size_t n) override;

 private:
  Communicator* comm_;
  TensorParallelLayout layout_;
};

}  // namespace trident
