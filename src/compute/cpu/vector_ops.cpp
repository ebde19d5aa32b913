#include "compute/cpu/vector_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "compute/cpu/vector_clones.hpp"
#include "core/half.hpp"

namespace trident::cpu {
namespace {
constexpr std::size_t kSumChunk = 1 << 14;
}  // namespace

TRIDENT_VECTOR_CLONES void add(float* out, const float* a, const float* b, std::size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

TRIDENT_VECTOR_CLONES void scale(float* x, float s, std::size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (std::size_t i = 0; i < n; ++i) x[i] *= s;
}

namespace {

struct AdamStep {  // an update's constants, by value (nothing a store could alias)
  float decay, beta1, beta2, eps, step, inv_sqrt_bc2, grad_scale;
};

// Element i of the update (the scale is exact when it is 1); with kBf16 also
// the updated parameter's bf16 bits.
template <bool kBf16>
inline void adamw_element(std::size_t i, float* p, const float* g, float* m, float* v,
                          std::uint16_t* bits, AdamStep a) {
  const float gi = g[i] * a.grad_scale;
  p[i] *= a.decay;
  m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * gi;
  v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * gi * gi;
  p[i] -= a.step * m[i] / (std::sqrt(v[i]) * a.inv_sqrt_bc2 + a.eps);
  if constexpr (kBf16) bits[i] = std::uint16_t(bf16_bits_of_f32(f32_bits(p[i])));
}

}  // namespace

TRIDENT_VECTOR_CLONES void adamw(float* p, const float* g, float* m, float* v, std::size_t n,
                                 float lr, float beta1, float beta2, float eps, float wd,
                                 float bc1, float bc2, float grad_scale,
                                 std::uint16_t* weights_bf16) {
  const AdamStep a{1.0f - lr * wd, beta1, beta2, eps, lr / bc1, 1.0f / std::sqrt(bc2), grad_scale};
  // One loop per variant, so each vectorises without a test inside.
  if (!weights_bf16) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (std::size_t i = 0; i < n; ++i) adamw_element<false>(i, p, g, m, v, nullptr, a);
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (std::size_t i = 0; i < n; ++i) adamw_element<true>(i, p, g, m, v, weights_bf16, a);
}

TRIDENT_VECTOR_CLONES double sum_squares(const float* x, std::size_t n) {
  const std::size_t chunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (std::size_t c = 0; c < chunks; ++c) {
    double s = 0;
    const std::size_t end = std::min(n, (c + 1) * kSumChunk);
#pragma omp simd reduction(+ : s)
    for (std::size_t i = c * kSumChunk; i < end; ++i) s += double(x[i]) * x[i];
    partial[c] = s;
  }
  double s = 0;
  for (double p : partial) s += p;
  return s;
}

}  // namespace trident::cpu
