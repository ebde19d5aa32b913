// Launchers of the Llama block's CUDA kernels (llama_kernels.cu), callable
// from host C++: the same operations, layouts and conventions as the CPU
// kernels of compute/cpu/llama_kernels.hpp, in f32 (storage and arithmetic).
// Pointers are device memory; launchers only enqueue on `stream` and the
// caller checks cudaGetLastError. Backward launchers ADD into their outputs,
// except RoPE's, which maps a gradient in place. Every sum runs in an order
// fixed by the shapes (no atomics), so every run gives the same bits.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace trident::gpu {

// RMSNorm, a warp per row; dweight sums over rows with one thread per column.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps, cudaStream_t stream);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C, cudaStream_t stream);

// A device copy of cpu::RopeTable's cos and sin, (positions, half) each.
struct RopeTableView {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int positions = 0, half = 0;
};
// RoPE in place on the first `heads` heads of each of B * T rows ld apart,
// token t at position pos0 + t: on the fused qkv, heads = NH + KVH rotates q
// and k in one pass. Throws std::out_of_range past the table (on the host).
void rope_forward(float* x, const RopeTableView& table, int B, int T, int heads, int hs,
                  std::size_t ld, int pos0, cudaStream_t stream);
void rope_backward(float* dx, const RopeTableView& table, int B, int T, int heads, int hs,
                   std::size_t ld, int pos0, cudaStream_t stream);

// SwiGLU of (N, 2F) rows [a | b] into (N, F); backward adds [da | db].
void swiglu_forward(float* out, const float* inp, int N, int F, cudaStream_t stream);
void swiglu_backward(float* dinp, const float* dout, const float* inp, int N, int F,
                     cudaStream_t stream);

// Grouped-query causal attention on the fused qkv (B, T, (NH + 2 KVH) hs),
// out (B, T, NH hs), lse (B, NH, T); hs <= kGqaMaxHeadSize. A warp per query
// row (forward and dQ) or key row (dK and dV, over its group's query heads in
// order): a plain kernel, correct rather than fast (no tensor cores, no tiles
// in shared memory). dots: B * NH * T floats of scratch.
constexpr int kGqaMaxHeadSize = 256;
void gqa_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int NH, int KVH,
                           int hs, cudaStream_t stream);
void gqa_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, float* dots, int B, int T, int NH, int KVH, int hs,
                            cudaStream_t stream);

}  // namespace trident::gpu
