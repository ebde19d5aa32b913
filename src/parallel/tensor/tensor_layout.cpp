#include "parallel/tensor/tensor_layout.hpp"

#include <algorithm>

namespace trident {

int TensorParallelLayout::valid_vocab(const GptConfig& c) const {
  return std::clamp(c.vocab - vocab_begin(c), 0, local_vocab(c));
}

}  // namespace trident
