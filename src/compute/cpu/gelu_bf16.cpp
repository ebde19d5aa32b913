#include "compute/cpu/gelu_bf16.hpp"

#include "compute/cpu/gelu.hpp"
#include "compute/cpu/vector_clones.hpp"
#include "core/half.hpp"

namespace trident::cpu {
namespace {

inline std::uint32_t bf16_of(float x) { return bf16_bits_of_f32(f32_bits(x)); }
inline float value_of(std::uint32_t b) { return f32_from_bits(b << 16); }

// Element i of the forward, with or without each kind of bits.
template <bool kBits, bool kInBits>
inline void gelu_forward_element(std::size_t i, float* out, std::uint16_t* bits, float* inp,
                                 std::uint16_t* inp_bits) {
  const std::uint32_t a = bf16_of(inp[i]);
  inp[i] = value_of(a);
  if constexpr (kInBits) inp_bits[i] = std::uint16_t(a);
  const std::uint32_t b = bf16_of(gelu_value(value_of(a)));
  out[i] = value_of(b);
  if constexpr (kBits) bits[i] = std::uint16_t(b);
}

}  // namespace

// One loop per variant, so each vectorises without a test inside; the loops
// stay in the cloned function, whose OpenMP bodies get its vector ISA.
TRIDENT_VECTOR_CLONES void gelu_forward_bf16(float* out, std::uint16_t* bits, float* inp,
                                             std::uint16_t* inp_bits, std::size_t n) {
  if (!out) {  // bits only
#pragma omp parallel for simd schedule(static) if (n > 16384)
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t a = inp ? bf16_of(inp[i]) : inp_bits[i];
      if (inp) inp_bits[i] = std::uint16_t(a);
      bits[i] = std::uint16_t(bf16_of(gelu_value(value_of(a))));
    }
  } else if (bits && inp_bits) {
#pragma omp parallel for simd schedule(static) if (n > 16384)
    for (std::size_t i = 0; i < n; ++i) gelu_forward_element<true, true>(i, out, bits, inp, inp_bits);
  } else if (bits) {
#pragma omp parallel for simd schedule(static) if (n > 16384)
    for (std::size_t i = 0; i < n; ++i) gelu_forward_element<true, false>(i, out, bits, inp, inp_bits);
  } else if (inp_bits) {
#pragma omp parallel for simd schedule(static) if (n > 16384)
    for (std::size_t i = 0; i < n; ++i) gelu_forward_element<false, true>(i, out, bits, inp, inp_bits);
  } else {
#pragma omp parallel for simd schedule(static) if (n > 16384)
    for (std::size_t i = 0; i < n; ++i) gelu_forward_element<false, false>(i, out, bits, inp, inp_bits);
  }
}

// The product starts from +0 as the unfused path's zeroed buffer does, so a
// -0 product is stored as +0 there too.
TRIDENT_VECTOR_CLONES void gelu_backward_bf16(float* dinp, std::uint16_t* bits, const float* inp,
                                              const std::uint16_t* inp_bits, const float* dout,
                                              std::size_t n) {
  if (inp_bits) {
#pragma omp parallel for simd schedule(static) if (n > 16384)
    for (std::size_t i = 0; i < n; ++i) {
      const float x = value_of(inp_bits[i]);
      const std::uint32_t b = bf16_of(0.0f + gelu_slope(x) * value_of(bf16_of(dout[i])));
      dinp[i] = value_of(b);
      if (bits) bits[i] = std::uint16_t(b);
    }
    return;
  }
  if (bits) {
#pragma omp parallel for simd schedule(static) if (n > 16384)
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t b = bf16_of(0.0f + gelu_slope(inp[i]) * value_of(bf16_of(dout[i])));
      dinp[i] = value_of(b);
      bits[i] = std::uint16_t(b);
    }
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > 16384)
  for (std::size_t i = 0; i < n; ++i)
    dinp[i] = value_of(bf16_of(0.0f + gelu_slope(inp[i]) * value_of(bf16_of(dout[i]))));
}

}  // namespace trident::cpu
