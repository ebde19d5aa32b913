// The CPU attention's tile helpers: a head's rows as bf16 bits, tile rows
// rounded or scaled where they were made (compute/cpu/attention.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "compute/cpu/gemm_bf16.hpp"
#include "compute/cpu/half_convert.hpp"
#include "core/half.hpp"

namespace trident::cpu::attention_tiles {

// rows x cols of x (leading dimension ld), which holds bf16 values, as their
// bits (the high halves), rows contiguous.
inline void bf16_bits_of(std::uint16_t* out, const float* x, int rows, int cols,
                         std::size_t ld) {
  for (int r = 0; r < rows; ++r) {
    const float* in = x + std::size_t(r) * ld;
    std::uint16_t* o = out + std::size_t(r) * cols;
#pragma omp simd
    for (int c = 0; c < cols; ++c) {
      std::uint32_t u;
      std::memcpy(&u, in + c, sizeof u);
      o[c] = std::uint16_t(u >> 16);
    }
  }
}

// The same rows from bits the caller gave (a bf16 run's saved copy): copied
// into the same contiguous layout, so the tile products, which run faster on
// contiguous rows than on rows 3C apart, give the same bits either way.
inline void bf16_bits_of(std::uint16_t* out, const std::uint16_t* x, int rows, int cols,
                         std::size_t ld) {
  for (int r = 0; r < rows; ++r)
    std::memcpy(out + std::size_t(r) * cols, x + std::size_t(r) * ld, cols * sizeof *x);
}

// A head's rows of a (T, ld) tensor as bf16 bits: from the caller's bits
// where given (`bits`, same layout as x), else from x's values.
template <class T>
void head_bits(std::uint16_t* out, const std::uint16_t* bits, const T* x, std::size_t offset,
               int rows, int cols, std::size_t ld) {
  if (bits) return bf16_bits_of(out, bits + offset, rows, cols, ld);
  if constexpr (std::is_same_v<T, float>) bf16_bits_of(out, x + offset, rows, cols, ld);
}

// A tile row of n values rounded to bf16 bits, where the row was made (in
// L1). Only float rows take the bf16 path; the double instance compiles it.
template <class T>
void round_row_bf16(std::uint16_t* out, const T* x, int n) {
#pragma omp simd
  for (int c = 0; c < n; ++c) out[c] = std::uint16_t(bf16_bits_of_f32(f32_bits(float(x[c]))));
}

// rows x cols from x (leading dimension ld) to out (out_ld).
inline void copy_rows(float* out, std::size_t out_ld, const float* x, std::size_t ld, int rows,
                      int cols) {
  for (int r = 0; r < rows; ++r) std::memcpy(out + r * out_ld, x + r * ld, cols * sizeof *x);
}

template <class T>
void scale_row(T* x, int n, T s) {
#pragma omp simd
  for (int c = 0; c < n; ++c) x[c] *= s;
}

// The bf16 path's f32 views: it runs only where T is float (bf16_tiles).
template <class T>
float* f32(T* x) { return reinterpret_cast<float*>(x); }
template <class T>
const float* f32(const T* x) { return reinterpret_cast<const float*>(x); }

// n values' bf16 bits: the caller's (`bits`) where given, else those of x,
// which holds bf16 values, written into `store`.
inline const std::uint16_t* bits_of(const std::uint16_t* bits, const float* x, std::size_t n,
                                    ScratchVector<std::uint16_t>& store) {
  if (bits) return bits;
  store.resize(n);
  to_16bit(store.data(), x, n, DType::bf16);
  return store.data();
}

// bf16 tiles are for f32 runs that ask for them on a CPU that has the kernels.
template <class T>
bool bf16_tiles(bool bf16) {
  if constexpr (std::is_same_v<T, float>) return bf16 && cpu_has_bf16_kernels();
  return false;
}

}  // namespace trident::cpu::attention_tiles
