// Vectorizable exp, tanh and row maximum for the float kernels. libm's
// scalar expf/tanhf cannot be vectorized without -ffast-math and took over a
// third of a CPU training step in GELU alone. exp: Cody-Waite reduction x = n ln2 + r and a
// degree-6 polynomial for e^r (max error ~2 ulp over the float range);
// tanh(y) = 1 - 2 / (e^{2y} + 1). The double instantiation keeps libm, so the
// finite-difference tests check the kernels' math, not this approximation.
#pragma once
#include <cmath>
#include <cstdint>
#include <bit>
#include <cstring>
#include <type_traits>

namespace trident::cpu {

inline float exp_poly(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);  // not fmin/fmax: those are libm calls
  // Round x*log2(e) to nearest with the 1.5*2^23 trick (no libm call, SIMD-friendly).
  const float shifter = 12582912.0f;
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

template <class T>
inline T exp_k(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_poly(x);
  else return std::exp(x);
}

template <class T>
inline T tanh_k(T x) {
  if constexpr (std::is_same_v<T, float>) return 1.0f - 2.0f / (exp_poly(2.0f * x) + 1.0f);
  else return std::tanh(x);
}

// The largest of x[0, n) and init, as vector max instructions: max is
// exact in any order, and the simd reduction lets GCC say so (a plain loop,
// or one over sixteen explicit lanes, stays one scalar max per element).
template <class T>
inline T max_of(const T* x, int n, T init) {
  T mx = init;
#pragma omp simd reduction(max : mx)
  for (int c = 0; c < n; ++c) mx = x[c] > mx ? x[c] : mx;
  return mx;
}

}  // namespace trident::cpu
