// W consecutive elements per access for element-wise kernels: W = 4 moves
// f32 values in 16-byte and bf16 bits in 8-byte loads and stores (one
// instruction each, so a warp's accesses coalesce into whole lines); W = 1 is
// the scalar fallback for unaligned pointers or lengths. The arithmetic per
// element is the same either way, so both give the same bits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace trident::gpu {

template <int W>
__device__ __forceinline__ void load(float (&v)[W], const float* p) {
  if constexpr (W == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = p[k];
  }
}

template <int W>
__device__ __forceinline__ void store(float* p, const float (&v)[W]) {
  if constexpr (W == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) p[k] = v[k];
  }
}

template <int W>
__device__ __forceinline__ void load(std::uint16_t (&v)[W], const std::uint16_t* p) {
  if constexpr (W == 4) {
    const ushort4 q = *reinterpret_cast<const ushort4*>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = p[k];
  }
}

template <int W>
__device__ __forceinline__ void store(std::uint16_t* p, const std::uint16_t (&v)[W]) {
  if constexpr (W == 4) {
    *reinterpret_cast<ushort4*>(p) = make_ushort4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) p[k] = v[k];
  }
}

// Whether n and every pointer given (null ones aside) allow W = 4: n a
// multiple of 4, each pointer aligned to 4 of its elements.
inline bool vectorizable(std::size_t n, std::initializer_list<const float*> f32,
                         std::initializer_list<const std::uint16_t*> bits = {}) {
  if (n % 4 != 0) return false;
  for (const float* p : f32)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  for (const std::uint16_t* p : bits)
    if (reinterpret_cast<std::uintptr_t>(p) % 8 != 0) return false;
  return true;
}

}  // namespace trident::gpu
