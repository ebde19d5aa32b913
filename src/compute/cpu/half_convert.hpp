// f32 <-> bf16/fp16 arrays on the CPU, with the bits of core/half.hpp. fp16
// uses the F16C instructions where the processor has them (picked at run
// time, so the portable build gets them too): they round to nearest even,
// overflow to inf and keep subnormals exactly as the scalar code does (NaNs
// stay NaN; their payload bits may differ).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"

namespace trident::cpu {

void to_16bit(std::uint16_t* dst, const float* src, std::size_t n, DType type);
void from_16bit(float* dst, const std::uint16_t* src, std::size_t n, DType type);
// x[i] = the value storing x[i] in `type` and reading it back gives.
void round_to_16bit(float* x, std::size_t n, DType type);
// dst[i] = src[i] rounded to bf16 (dst may be src), bits[i] its bf16 bits.
void round_to_bf16(float* dst, std::uint16_t* bits, const float* src, std::size_t n);

}  // namespace trident::cpu
