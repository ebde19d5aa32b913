// The CPU's ring-attention block kernels (compute/attention_block.hpp), in
// f32 (double for the tests).
#pragma once
#include "compute/attention_block.hpp"

namespace trident::cpu {

template <class T>
void attention_block_forward(const AttentionBlockOf<T>& a);
template <class T>
void attention_block_backward(const AttentionBlockOf<T>& a, const AttentionBlockGradsOf<T>& g);

}  // namespace trident::cpu
