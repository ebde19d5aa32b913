// CPU kernels of the GPT block, templated on the scalar type: the backend runs
// them in float; the finite-difference tests run the same code in double.
// Reductions over rows are split by columns so results do not depend on the
// number of threads (determinism across thread counts and runs).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace trident::cpu {

// Token embedding of a vocabulary shard: rows [lo, lo + count); tokens outside
// the shard give zeros (the tensor group sums the shards).
template <class T>
void embedding_forward(T* out, const std::int32_t* tok, const T* wte, int lo, int count, int N,
                       int C);
// The same from a bf16 table's bits.
void embedding_forward_bits(float* out, const std::int32_t* tok, const std::uint16_t* wte, int lo,
                            int count, int N, int C);
template <class T>
void embedding_backward(T* dwte, const T* dout, const std::int32_t* tok, int lo, int count, int N,
                        int C);
// out[n] += wpe[(first + n) % T]: position embedding of N consecutive tokens.
template <class T>
void position_forward(T* out, const T* wpe, int N, int T_, int first, int C);
template <class T>
void position_backward(T* dwpe, const T* dout, int N, int T_, int first, int C);
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N,
                       int C);
template <class T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const T* mean, const T* rstd, int N, int C);
// out[i, :] += bias; dbias += the column sums of dout (N x OC).
template <class T>
void add_bias(T* out, const T* bias, int N, int OC);
template <class T>
void bias_backward(T* dbias, const T* dout, int N, int OC);
template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int IC, int OC);
template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int IC, int OC);
// Causal attention, flash-style (attention.cpp): qkv (B, T, 3C) as [q | k | v],
// out (B, T, C), lse (B, NH, T) the log-sum-exp of each row's scaled scores,
// all backward needs besides q, k, v, out and dout (no T x T matrix).
// Queries and keys per tile of the f32 kernel and of bf16 products on CPUs
// without AMX (which fuse attention, amx_attention.hpp): a thread's scores
// tile is 64 KiB.
constexpr int kAttentionTile = 128;
// bf16 (f32 only): the tile products on bf16 kernels (bf16_operands.hpp), reading
// qkv16 / dout16 (the same values as bf16 bits, same layout) where given
// instead of packing a head's rows; with qkv16 given, qkv may be null.
template <class T>
void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int C, int NH,
                       bool bf16 = false, const std::uint16_t* qkv16 = nullptr);
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B,
                        int T_, int C, int NH, bool bf16 = false,
                        const std::uint16_t* qkv16 = nullptr,
                        const std::uint16_t* dout16 = nullptr);
template <class T>
void gelu_forward(T* out, const T* inp, std::size_t n);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n);
// Softmax cross-entropy over a vocabulary shard of V columns (the first
// `valid` real, the rest padding) starting at global column lo, in three
// phases so the tensor group can combine shards between them:
//   1. row maxima;  2. packed[0..N) = sum exp(z - max), packed[N..2N) = the
//   target's logit (0 where the target is in another shard);  3. losses and,
//   if dlogits is non-null, dloss * (softmax - onehot) (may alias logits).
template <class T>
void xent_max(T* row_max, const T* logits, int N, int V, int valid);
template <class T>
void xent_sums(T* packed, const T* logits, const T* row_max, const std::int32_t* targets, int lo,
               int N, int V, int valid);
template <class T>
void xent_finish(T* losses, T* dlogits, const T* logits, const T* row_max, const T* packed,
                 const std::int32_t* targets, int lo, int N, int V, int valid, T dloss);

}  // namespace trident::cpu
