// The element-wise half of causal attention: the masked softmax between the
// two batched GEMMs of forward (which also yields each row's log-sum-exp, the
// only statistic the seam keeps), the probabilities again from that
// log-sum-exp for backward, and the softmax backward. One warp per row of a
// (rows, T) score block; row r is query t = r % T and sees keys 0..t. Where
// `bits` is given, each kernel also writes its output's bf16 rounding there
// (the operand of the bf16 product that reads it), and forward and backward
// write only that.
#include "compute/cuda/device_math.cuh"
#include "compute/cuda/launch.hpp"

namespace trident::gpu {
namespace {

constexpr int kWarps = 8;

// In place: scores (already scaled by the GEMM) -> probabilities; zeros above
// the diagonal so the P.V GEMM may run over the whole row.
template <class S>
__global__ void causal_softmax_forward_kernel(S* att, float* lse, std::size_t rows, int T,
                                              std::uint16_t* bits) {
  const std::size_t row = std::size_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int t = int(row % T);
  S* p = att + row * T;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, to_f32(p[j]));
  mx = warp_reduce(mx, MaxOp{});
  float sum = 0;
  for (int j = lane; j <= t; j += 32) sum += expf(to_f32(p[j]) - mx);
  sum = warp_reduce(sum, SumOp{});
  const float inv = 1.0f / sum;
  std::uint16_t* b = bits ? bits + row * T : nullptr;
  for (int j = lane; j < T; j += 32) {
    const float v = j <= t ? expf(to_f32(p[j]) - mx) * inv : 0.0f;
    if (b) b[j] = bf16_bits(v);
    else p[j] = from_f32<S>(v);
  }
  if (lane == 0) lse[row] = mx + logf(sum);
}

// In place: scaled scores -> exp(score - lse), the forward's probabilities.
template <class S>
__global__ void causal_softmax_recompute_kernel(S* att, const float* lse, std::size_t rows, int T,
                                                std::uint16_t* bits) {
  const std::size_t row = std::size_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int t = int(row % T);
  const float l = lse[row];
  S* p = att + row * T;
  std::uint16_t* b = bits ? bits + row * T : nullptr;
  for (int j = lane; j < T; j += 32) {  // both kept: the softmax backward reads p
    const float v = j <= t ? expf(to_f32(p[j]) - l) : 0.0f;
    p[j] = from_f32<S>(v);
    if (b) b[j] = bf16_bits(v);
  }
}

template <class S>
__global__ void causal_softmax_backward_kernel(S* datt, const S* att, std::size_t rows, int T,
                                               std::uint16_t* bits) {
  const std::size_t row = std::size_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int t = int(row % T);
  const S* p = att + row * T;
  S* d = datt + row * T;
  float dot = 0;
  for (int j = lane; j <= t; j += 32) dot += to_f32(p[j]) * to_f32(d[j]);
  dot = warp_reduce(dot, SumOp{});
  std::uint16_t* b = bits ? bits + row * T : nullptr;
  for (int j = lane; j < T; j += 32) {
    const float v = j <= t ? to_f32(p[j]) * (to_f32(d[j]) - dot) : 0.0f;
    if (b) b[j] = bf16_bits(v);
    else d[j] = from_f32<S>(v);
  }
}

unsigned blocks_for(std::size_t rows) { return unsigned((rows + kWarps - 1) / kWarps); }

}  // namespace

template <class S>
void causal_softmax_forward(S* att, float* lse, std::size_t rows, int T, cudaStream_t s,
                            std::uint16_t* bits) {
  if (rows == 0) return;
  causal_softmax_forward_kernel<<<blocks_for(rows), kWarps * 32, 0, s>>>(att, lse, rows, T, bits);
}

template <class S>
void causal_softmax_recompute(S* att, const float* lse, std::size_t rows, int T, cudaStream_t s,
                              std::uint16_t* bits) {
  if (rows == 0) return;
  causal_softmax_recompute_kernel<<<blocks_for(rows), kWarps * 32, 0, s>>>(att, lse, rows, T,
                                                                           bits);
}

template <class S>
void causal_softmax_backward(S* datt, const S* att, std::size_t rows, int T, cudaStream_t s,
                             std::uint16_t* bits) {
  if (rows == 0) return;
  causal_softmax_backward_kernel<<<blocks_for(rows), kWarps * 32, 0, s>>>(datt, att, rows, T,
                                                                          bits);
}

#define TRIDENT_INSTANTIATE(S)                                                     \
  template void causal_softmax_forward<S>(S*, float*, std::size_t, int, cudaStream_t,       \
                                          std::uint16_t*);                                 \
  template void causal_softmax_recompute<S>(S*, const float*, std::size_t, int, cudaStream_t, \
                                            std::uint16_t*);                               \
  template void causal_softmax_backward<S>(S*, const S*, std::size_t, int, cudaStream_t,     \
                                           std::uint16_t*);
TRIDENT_GPU_STORAGE_TYPES(TRIDENT_INSTANTIATE)
#undef TRIDENT_INSTANTIATE

}  // namespace trident::gpu
