// bf16 and IEEE fp16 as 16-bit storage: conversion from f32 with round to
// nearest even (fp16 overflows to inf, keeps subnormals; NaN stays NaN) and
// back. These are the bits cuda_bf16.h / cuda_fp16.h produce, so the CPU and
// CUDA backends store the same values.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/dtype.hpp"

namespace trident {

inline std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((x >> 16) | 0x40u);  // quiet NaN
  return std::uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
// f32_to_bf16 on the bits x without a branch, so loops over it vectorise.
inline std::uint32_t bf16_bits_of_f32(std::uint32_t x) {
  const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return (x & 0x7fffffffu) > 0x7f800000u ? ((x >> 16) | 0x40u) : rounded;
}
inline float bf16_to_f32(std::uint16_t h) { return f32_from_bits(std::uint32_t(h) << 16); }

inline std::uint16_t f32_to_f16(float f) {
  const std::uint32_t x = f32_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u, abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return std::uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf
  auto round_shift = [](std::uint32_t m, std::uint32_t shift) {   // m >> shift, to nearest even
    const std::uint32_t k = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    return k + (rem > half || (rem == half && (k & 1u)));
  };
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal (units of 2^-24) or zero
    const std::uint32_t e = abs >> 23, shift = 126 - e;
    if (shift > 24) return std::uint16_t(sign);
    return std::uint16_t(sign | round_shift((abs & 0x7fffffu) | 0x800000u, shift));
  }
  // Normal: rebias the exponent; a carry out of the mantissa bumps it correctly.
  return std::uint16_t(sign | round_shift(abs - ((127u - 15u) << 23), 13));
}
inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return f32_from_bits(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    const float v = float(m) * (1.0f / 16777216.0f);  // m * 2^-24, exact
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((e + 127u - 15u) << 23) | (m << 13));
}

}  // namespace trident
