// Causal attention fused on AMX tiles: FlashAttention-2 (Dao 2023) on blocks
// of 32 queries x 32 keys, whose scores, softmax and products stay in L1; a
// (batch, head)'s operands are packed into the tile unit's layouts once per
// thread, and nothing T x T is written. Probabilities (and in backward the
// score gradients) enter the products rounded to bf16 while the softmax sums
// use them unrounded, as the tile-GEMM path (attention.cpp) does. Forward in
// amx_attention.cpp, backward in amx_attention_backward.cpp.
#pragma once

#include <cstdint>

namespace trident::cpu {

// out (B, T, C) f32 and lse (B, NH, T) from q, k, v given as bf16 bits in
// qkv16 (B, T, 3C) as [q | k | v]. False (nothing written) without AMX.
bool amx_attention_forward(float* out, float* lse, const std::uint16_t* qkv16, int B, int T,
                           int C, int NH);

// dqkv (B, T, 3C) += the gradients of q, k, v, from dout (B, T, C) as f32
// values and bf16 bits, out and lse as forward made them. False (nothing
// written) without AMX.
bool amx_attention_backward(float* dqkv, const float* dout, const float* out, const float* lse,
                            const std::uint16_t* qkv16, const std::uint16_t* dout16, int B, int T,
                            int C, int NH);

}  // namespace trident::cpu
