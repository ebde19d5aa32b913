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
