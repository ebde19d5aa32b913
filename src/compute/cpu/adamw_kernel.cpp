// The CPU's AdamW loop, in a file of its own: it is compiled without FP
// contraction (src/CMakeLists.txt), so the fused multiply-adds are exactly
// those compute/adamw_math.hpp writes and the host-side update of ZeRO-Offload
// equals the CUDA kernel's bit for bit.
#include <cmath>
#include <cstdint>

#include "compute/adamw_math.hpp"
#include "compute/cpu/vector_clones.hpp"
#include "compute/cpu/vector_ops.hpp"
#include "core/half.hpp"

namespace trident::cpu {
namespace {

// Element i of the update as compute/adamw_math.hpp writes it (this file is
// compiled without FP contraction; the scale is exact when it is 1); with
// kBf16 also the updated parameter's bf16 bits. The constants come by value:
// nothing a store could alias.
template <bool kBf16>
inline void adamw_element(std::size_t i, float* p, const float* g, float* m, float* v,
                          std::uint16_t* bits, AdamWScalars a) {
  const float gi = g[i] * a.grad_scale;
  p[i] *= a.decay;
  m[i] = std::fma(a.beta1, m[i], a.one_minus_beta1 * gi);
  v[i] = std::fma(a.beta2, v[i], a.one_minus_beta2 * gi * gi);
  p[i] -= a.step * m[i] / std::fma(std::sqrt(v[i]), a.inv_sqrt_bc2, a.eps);
  if constexpr (kBf16) bits[i] = std::uint16_t(bf16_bits_of_f32(f32_bits(p[i])));
}

}  // namespace

TRIDENT_VECTOR_CLONES void adamw(float* p, const float* g, float* m, float* v, std::size_t n,
                                 float lr, float beta1, float beta2, float eps, float wd,
                                 float bc1, float bc2, float grad_scale,
                                 std::uint16_t* weights_bf16) {
  const AdamWScalars a = adamw_scalars(lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale);
  // One loop per variant, so each vectorises without a test inside.
  if (!weights_bf16) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (std::size_t i = 0; i < n; ++i) adamw_element<false>(i, p, g, m, v, nullptr, a);
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (std::size_t i = 0; i < n; ++i) adamw_element<true>(i, p, g, m, v, weights_bf16, a);
}

}  // namespace trident::cpu
