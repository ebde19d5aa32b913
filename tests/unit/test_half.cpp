// 16-bit conversion on the CPU backend: the array paths (F16C for fp16 where
// the processor has it, split over threads) give the bits of the scalar
// reference in core/half.hpp for every non-NaN input class: normals,
// subnormals, values that round to inf, exact ties, signed zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compute/backend.hpp"
#include "core/half.hpp"

using namespace trident;

namespace {

std::vector<float> awkward_values(std::size_t n) {
  std::mt19937 rng(7);
  std::vector<float> v;
  for (float x : {0.0f, -0.0f, 65504.0f, 65520.0f, -65519.9f, 1e-8f, 5.96e-8f, 2.98e-8f,
                  6.1e-5f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, INFINITY, -INFINITY, 3e38f})
    v.push_back(x);
  std::uniform_int_distribution<std::uint32_t> bits;
  while (v.size() < n) {
    float x;
    const std::uint32_t b = bits(rng);
    std::memcpy(&x, &b, 4);
    if (std::isnan(x)) continue;
    // Mostly around fp16's range, some anywhere.
    v.push_back(v.size() % 4 == 0 ? x : std::ldexp(std::fmod(std::abs(x), 1.0f) + 0.5f,
                                                    int(b % 40) - 26) * (b & 1 ? -1 : 1));
  }
  return v;
}

TEST(Half, ArrayConversionsMatchTheScalarBits) {
  auto be = make_cpu_backend(2);
  for (std::size_t n : {std::size_t(13), std::size_t(200003)}) {  // a tail; several threads
    const std::vector<float> x = awkward_values(n);
    for (DType t : {DType::f16, DType::bf16}) {
      std::vector<std::uint16_t> h(n);
      be->convert(h.data(), t, x.data(), DType::f32, n);
      std::vector<float> back(n), rounded = x;
      be->convert(back.data(), DType::f32, h.data(), t, n);
      be->round_to(rounded.data(), t, n);
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t ref = t == DType::f16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
        ASSERT_EQ(h[i], ref) << dtype_name(t) << " x = " << x[i] << " i = " << i;
        const float wide = t == DType::f16 ? f16_to_f32(ref) : bf16_to_f32(ref);
        ASSERT_EQ(std::memcmp(&back[i], &wide, 4), 0) << dtype_name(t) << " i = " << i;
        ASSERT_EQ(std::memcmp(&rounded[i], &wide, 4), 0) << dtype_name(t) << " i = " << i;
      }
    }
  }
}

}  // namespace
