// The AMX tile layouts shared by the bf16 GEMM (amx_gemm.cpp) and the fused
// attention (amx_attention.cpp): tile configuration and the packing of
// operands into the rows the tile unit reads. Included by those two files
// only (it sets their ISA target and silences GCC 12's AVX-512 warnings).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "compute/cpu/kernel_scratch.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// GCC 12 flags the deliberately undefined registers inside its AVX-512
// intrinsics (_mm512_undefined_*) as maybe uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#define TRIDENT_AMX 1
#define TRIDENT_AMX_TARGET \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

#ifdef TRIDENT_AMX
namespace trident::cpu::amx_tiles {

using u16 = std::uint16_t;

// Tile geometry: a tile is 16 rows of 64 bytes (32 bf16 or 16 f32). C is
// computed in 32 x 32 blocks: tiles 0-3 accumulate, 4-5 hold A's two 16-row
// halves for a step of 32 along K, 6-7 B's two 16-column halves.
constexpr int kRows = 16, kStep = 32, kBlock = 32;

struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};

inline TRIDENT_AMX_TARGET void configure_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = kRows;
    config.bytes_per_row[t] = 64;
  }
  _tile_loadconfig(&config);
}

inline int round_up(int x, int to) { return (x + to - 1) / to * to; }

// K padded to whole steps; K = 0 takes one step of zeros, so C is its start value.
inline int padded_k(int K) { return round_up(std::max(K, 1), kStep); }

// Of 32 values from k on, those below K.
inline TRIDENT_AMX_TARGET __mmask32 k_mask(int left) {
  return left >= 32 ? ~__mmask32(0) : __mmask32((1u << std::max(0, left)) - 1);
}

// Of 16 lanes, the first `left` (none when left <= 0).
inline __mmask16 lanes_below(int left) {
  return __mmask16(left >= 16 ? 0xffff : left <= 0 ? 0 : (1u << left) - 1);
}

// 16 values of lo and hi as 16 words (lo[i], hi[i]): a (k, k + 1) pair each.
inline TRIDENT_AMX_TARGET __m512i interleave_words(__m256i lo, __m256i hi) {
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(order, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}

// 16 x 16 32-bit words, transposed in registers.
inline TRIDENT_AMX_TARGET void transpose_16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + j], lane L: column 4L + j of rows 4i..4i+3
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i ab_lo = _mm512_shuffle_i32x4(r[j], r[4 + j], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i ab_hi = _mm512_shuffle_i32x4(r[j], r[4 + j], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i cd_lo = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i cd_hi = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], _MM_SHUFFLE(3, 2, 3, 2));
    t[j] = _mm512_shuffle_i32x4(ab_lo, cd_lo, _MM_SHUFFLE(2, 0, 2, 0));
    t[4 + j] = _mm512_shuffle_i32x4(ab_lo, cd_lo, _MM_SHUFFLE(3, 1, 3, 1));
    t[8 + j] = _mm512_shuffle_i32x4(ab_hi, cd_hi, _MM_SHUFFLE(2, 0, 2, 0));
    t[12 + j] = _mm512_shuffle_i32x4(ab_hi, cd_hi, _MM_SHUFFLE(3, 1, 3, 1));
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Columns [n0, n0 + 16) of op(B), K range [k0, k0 + kc), as the tile unit
// reads B: kc / 2 rows of 16 (k, k + 1) pairs. Padding past K and N is zero.
inline TRIDENT_AMX_TARGET void pack_b_block(u16* out, bool tb, int n0, int N, int k0, int kc, int K,
                                     const u16* B, int ldb) {
  const int cols = std::clamp(N - n0, 0, 16);
  const __mmask16 valid = lanes_below(cols);
  if (tb) {  // B stored N x K: a column's (k, k + 1) pairs are adjacent; transpose the words
    for (int k = k0; k < k0 + kc; k += kStep) {
      const __mmask32 kvalid = k_mask(K - k);
      __m512i w[16];
      for (int c = 0; c < 16; ++c)
        w[c] = c < cols ? _mm512_maskz_loadu_epi16(kvalid, B + std::size_t(n0 + c) * ldb + k)
                        : _mm512_setzero_si512();
      transpose_16x16(w);
      for (int kk = 0; kk < 16; ++kk)
        _mm512_storeu_si512(out + std::size_t(k - k0 + 2 * kk) * 16, w[kk]);
    }
    return;
  }
  // B stored K x N: interleave rows k and k + 1.
  const int kend = std::min(K, k0 + kc);
  for (int kk = 0; kk < kc / 2; ++kk) {
    const int k = k0 + 2 * kk;
    const __m256i lo = k < kend ? _mm256_maskz_loadu_epi16(valid, B + std::size_t(k) * ldb + n0)
                                : _mm256_setzero_si256();
    const __m256i hi = k + 1 < kend
                           ? _mm256_maskz_loadu_epi16(valid, B + std::size_t(k + 1) * ldb + n0)
                           : _mm256_setzero_si256();
    _mm512_storeu_si512(out + std::size_t(kk) * 32, interleave_words(lo, hi));
  }
}

// Rows [m0, m0 + 32) of op(A), K range [k0, k0 + kc), as tiles: per step of
// 32 along K, two 16 x 32 tiles (rows 0-15, 16-31). Padding is zero.
inline TRIDENT_AMX_TARGET void pack_a_panel(u16* out, bool ta, int m0, int M, int k0, int kc, int K,
                                     const u16* A, int lda) {
  const int rows = std::min(kBlock, M - m0);
  for (int s = 0; s < kc / kStep; ++s) {
    const int k = k0 + s * kStep;
    const __mmask32 kvalid = k_mask(K - k);
    for (int h = 0; h < 2; ++h) {
      u16* tile = out + std::size_t(s) * 1024 + h * 512;
      if (!ta) {
        for (int r = 0; r < 16; ++r) {
          const int m = m0 + h * 16 + r;
          const __m512i v = m < M ? _mm512_maskz_loadu_epi16(kvalid, A + std::size_t(m) * lda + k)
                                  : _mm512_setzero_si512();
          _mm512_storeu_si512(tile + r * 32, v);
        }
        continue;
      }
      // A stored K x M: pair rows k, k + 1 into words, then transpose.
      const int hrows = std::clamp(rows - h * 16, 0, 16);
      const __mmask16 mvalid = lanes_below(hrows);
      __m512i w[16];
      for (int kk = 0; kk < 16; ++kk) {
        const int ka = k + 2 * kk;
        const u16* src = A + std::size_t(ka) * lda + m0 + h * 16;
        const __m256i lo = ka < K ? _mm256_maskz_loadu_epi16(mvalid, src) : _mm256_setzero_si256();
        const __m256i hi =
            ka + 1 < K ? _mm256_maskz_loadu_epi16(mvalid, src + lda) : _mm256_setzero_si256();
        w[kk] = interleave_words(lo, hi);
      }
      transpose_16x16(w);
      for (int r = 0; r < 16; ++r) _mm512_storeu_si512(tile + r * 32, w[r]);
    }
  }
}

// c (32 x 32 f32, rows ldc bytes apart) = (c when from_c, else 0) + the
// products of `steps` steps: A's two 16-row tiles at a + s * 1024 (+ 512),
// B's two 16-column tiles at b0 + s * 512 and b1 + s * 512.
inline TRIDENT_AMX_TARGET void tile_block(const u16* a, const u16* b0, const u16* b1, int steps,
                                          float* c, int ldc, bool from_c) {
  const std::size_t down = std::size_t(16) * ldc / sizeof(float);
  if (from_c) {
    _tile_loadd(0, c, ldc);
    _tile_loadd(1, c + 16, ldc);
    _tile_loadd(2, c + down, ldc);
    _tile_loadd(3, c + down + 16, ldc);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int s = 0; s < steps; ++s) {
    _tile_loadd(4, a + s * 1024, 64);
    _tile_loadd(6, b0 + s * 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b1 + s * 512, 64);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a + s * 1024 + 512, 64);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, ldc);
  _tile_stored(1, c + 16, ldc);
  _tile_stored(2, c + down, ldc);
  _tile_stored(3, c + down + 16, ldc);
}

// e^x on 16 lanes: fast_math.hpp's exp_poly (the same reduction and
// polynomial), with 2^n applied by vscalefps. Lanes past
// 88 overflow, which the callers' masks discard: valid lanes are <= 0.
inline TRIDENT_AMX_TARGET __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x));
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// 16 f32 as bf16 bits, rounded to nearest even (as bf16_bits_of_f32).
inline TRIDENT_AMX_TARGET __m256i bf16_bits16(__m512 x) {
  return (__m256i)_mm512_cvtneps_pbh(x);
}

// 64-byte aligned storage of n values in `v`.
template <class T>
T* aligned(ScratchVector<T>& v, std::size_t n) {
  v.resize(n + 64 / sizeof(T));
  return reinterpret_cast<T*>((reinterpret_cast<std::uintptr_t>(v.data()) + 63) &
                              ~std::uintptr_t(63));
}

}  // namespace trident::cpu::amx_tiles
#endif
