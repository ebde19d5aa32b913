// Device-side helpers shared by the kernels: storage conversions (every kernel
// is templated on its storage type S and accumulates in fp32, so bf16 and fp16
// are instantiations) and reductions whose order is fixed by the launch shape,
// never by scheduling, so every run gives the same bits.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

namespace trident::gpu {

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <class S> __device__ __forceinline__ S from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}
// x rounded to bf16, as its 16 bits (what a bf16 arena or GEMM operand holds).
__device__ __forceinline__ std::uint16_t bf16_bits(float x) {
  return __bfloat16_as_ushort(from_f32<__nv_bfloat16>(x));
}

struct SumOp {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Butterfly over the warp. Each step combines lanes i and i^o with a
// commutative op, so every lane ends with the same bits.
template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Whole-block reduction (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. Safe to call repeatedly in one kernel.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T partial[32];
  __shared__ T result;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // an earlier call may still be reading partial/result
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < warps ? partial[lane] : identity;
    w = warp_reduce(w, op);
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}

// Blocks for an element-wise kernel of n items (grid-stride loops cover any n).
inline unsigned elementwise_blocks(std::size_t n, unsigned threads) {
  const std::size_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > (1u << 20) ? (1u << 20) : b));
}

}  // namespace trident::gpu

// The storage types every kernel is instantiated for. Mixed precision adds
// X(__nv_bfloat16) and X(__half) here (defining it on the command line to
// include them checks that every kernel compiles for 16-bit storage).
#ifndef TRIDENT_GPU_STORAGE_TYPES
#define TRIDENT_GPU_STORAGE_TYPES(X) X(float)
#endif
