// The tensor/sequence-parallel boundary operations the model calls: Megatron's
// conjugate operators around each parallel region and the vocab-parallel
// loss's reductions. The model is given them (GptModelOptions::tensor_group);
// parallel/tensor/tensor_comm implements them over the tensor group. Without
// them the model runs alone: sums are identities, gathers copies.
#pragma once
#include <cstddef>
#include <cstring>

namespace trident {

class TensorGroupOps {
 public:
  virtual ~TensorGroupOps() = default;
  // Sum partial results over the tensor group, in place: a row-parallel
  // layer's output, the gradient entering a column-parallel one, the partial
  // norm and position gradients of sequence parallelism.
  virtual void all_reduce(float* buf, std::size_t n) = 0;
  // Sequence parallel: this rank's tokens -> all tokens (rank order), and the
  // reverse with a sum; each moves `local_count` elements per rank.
  virtual void gather_tokens(const float* local, float* full, std::size_t local_count) = 0;
  virtual void reduce_scatter_tokens(const float* full, float* local,
                                     std::size_t local_count) = 0;
  // Vocab-parallel softmax statistics: the row maxima (max), then the packed
  // [sum of exp, target logit] pairs (sum).
  virtual void max_over_vocab(float* row_max, std::size_t rows) = 0;
  virtual void sum_over_vocab(float* packed, std::size_t n) = 0;
};

// One tensor rank (and host memory, as for the gathers of an inactive group).
class SoloTensorGroup final : public TensorGroupOps {
 public:
  void all_reduce(float*, std::size_t) override {}
  void gather_tokens(const float* local, float* full, std::size_t local_count) override {
    if (full != local) std::memcpy(full, local, local_count * sizeof(float));
  }
  void reduce_scatter_tokens(const float* full, float* local, std::size_t local_count) override {
    if (full != local) std::memcpy(local, full, local_count * sizeof(float));
  }
  void max_over_vocab(float*, std::size_t) override {}
  void sum_over_vocab(float*, std::size_t) override {}
};

}  // namespace trident
