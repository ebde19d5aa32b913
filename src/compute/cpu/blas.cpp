#include "compute/cpu/blas.hpp"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>

namespace trident::cpu {
namespace {

// Enough blocks to spread over many cores, none thinner than a few kernel tiles.
constexpr int kTargetBlocks = 64;
constexpr int kMinBlock = 32;

int block_extent(int extent) {
  const int even = (extent + kTargetBlocks - 1) / kTargetBlocks;
  return std::max(kMinBlock, (even + 15) / 16 * 16);
}

}  // namespace

void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  const bool by_rows = M >= N;
  const int extent = by_rows ? M : N, block = block_extent(extent);
  const int blocks = (extent + block - 1) / block;
  auto run = [&](int b) {
    const std::int64_t lo = std::int64_t(b) * block;
    const int n = int(std::min<std::int64_t>(block, extent - lo));
    if (by_rows)
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', n, N, K, alpha, ta ? A + lo : A + lo * lda, lda,
                 B, ldb, beta, C + lo * ldc, ldc);
    else
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, n, K, alpha, A, lda,
                 tb ? B + lo * ldb : B + lo, ldb, beta, C + lo, ldc);
  };
  // Each call on one thread: inside a parallel region an OpenMP library would
  // otherwise still fork when that region is inactive (a team of one).
#pragma omp parallel if (omp_get_level() == 0 && blocks > 1)
  {
    const int outer = omp_get_max_threads();
    omp_set_num_threads(1);
#pragma omp for schedule(static)
    for (int b = 0; b < blocks; ++b) run(b);
    omp_set_num_threads(outer);
  }
}

}  // namespace trident::cpu
