// Launchers of ring attention's block kernels (attention_block.cu): the
// compute seam's attention_block_forward/backward on `s`.
#pragma once
#include <cuda_runtime_api.h>

#include "compute/attention_block.hpp"

namespace trident::gpu {

bool attention_block_fits(int width, int heads);  // the head size the kernels take
void attention_block_forward(const AttentionBlock& a, cudaStream_t s);
void attention_block_backward(const AttentionBlock& a, const AttentionBlockGrads& g,
                              cudaStream_t s);

}  // namespace trident::gpu
