#include "compute/cpu/half_convert.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "compute/cpu/vector_clones.hpp"
#include "core/half.hpp"

namespace trident::cpu {
namespace {

bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}

// The F16C loops handle whole vectors of 8; the scalar code does the tail.
__attribute__((target("avx,f16c"))) std::size_t to_f16_f16c(std::uint16_t* d, const float* s,
                                                             std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  return i;
}

__attribute__((target("avx,f16c"))) std::size_t from_f16_f16c(float* d, const std::uint16_t* s,
                                                               std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  return i;
}

__attribute__((target("avx,f16c"))) std::size_t round_f16_f16c(float* x, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                            _MM_FROUND_TO_NEAREST_INT)));
  return i;
}

TRIDENT_VECTOR_CLONES void to_bf16_loop(std::uint16_t* d, const float* s, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) d[i] = std::uint16_t(bf16_bits_of_f32(f32_bits(s[i])));
}

TRIDENT_VECTOR_CLONES void from_bf16_loop(float* d, const std::uint16_t* s, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) d[i] = f32_from_bits(std::uint32_t(s[i]) << 16);
}

TRIDENT_VECTOR_CLONES void round_bf16_loop(float* x, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) x[i] = f32_from_bits(bf16_bits_of_f32(f32_bits(x[i])) << 16);
}

TRIDENT_VECTOR_CLONES void round_pack_bf16_loop(float* d, std::uint16_t* bits, const float* s,
                                               std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t b = bf16_bits_of_f32(f32_bits(s[i]));
    d[i] = f32_from_bits(b << 16);
    bits[i] = std::uint16_t(b);
  }
}

// Splits [0, n) over the OpenMP threads (large arrays only) and runs
// body(lo, hi) on each part.
template <class Body>
void parallel_parts(std::size_t n, Body body) {
  constexpr std::size_t kMin = 65536;
  if (n <= kMin) return body(std::size_t(0), n);
#pragma omp parallel
  {
    const std::size_t t = std::size_t(omp_get_thread_num()), k = std::size_t(omp_get_num_threads());
    const std::size_t per = (n + k - 1) / k / 8 * 8 + 8;
    const std::size_t lo = std::min(n, t * per), hi = std::min(n, lo + per);
    if (lo < hi) body(lo, hi);
  }
}

}  // namespace

void to_16bit(std::uint16_t* d, const float* s, std::size_t n, DType type) {
  parallel_parts(n, [&](std::size_t lo, std::size_t hi) {
    std::size_t i = lo;
    if (type == DType::f16) {
      if (has_f16c()) i += to_f16_f16c(d + lo, s + lo, hi - lo);
      for (; i < hi; ++i) d[i] = f32_to_f16(s[i]);
    } else {
      to_bf16_loop(d + lo, s + lo, hi - lo);
    }
  });
}

void from_16bit(float* d, const std::uint16_t* s, std::size_t n, DType type) {
  parallel_parts(n, [&](std::size_t lo, std::size_t hi) {
    std::size_t i = lo;
    if (type == DType::f16) {
      if (has_f16c()) i += from_f16_f16c(d + lo, s + lo, hi - lo);
      for (; i < hi; ++i) d[i] = f16_to_f32(s[i]);
    } else {
      from_bf16_loop(d + lo, s + lo, hi - lo);
    }
  });
}

void round_to_16bit(float* x, std::size_t n, DType type) {
  parallel_parts(n, [&](std::size_t lo, std::size_t hi) {
    std::size_t i = lo;
    if (type == DType::f16) {
      if (has_f16c()) i += round_f16_f16c(x + lo, hi - lo);
      for (; i < hi; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
    } else {
      round_bf16_loop(x + lo, hi - lo);
    }
  });
}

void round_to_bf16(float* dst, std::uint16_t* bits, const float* src, std::size_t n) {
  parallel_parts(n, [&](std::size_t lo, std::size_t hi) {
    round_pack_bf16_loop(dst + lo, bits + lo, src + lo, hi - lo);
  });
}

}  // namespace trident::cpu
