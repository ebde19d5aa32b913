#include "compute/cpu/blas.hpp"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>

namespace trident::cpu {
namespace {

// Tiles of C no smaller than this on a side (a GEMM on a thinner tile repacks
// the other operand too often), at most 8 per side: up to 64 tiles to spread.
constexpr int kMinTile = 256;
constexpr int kTilesPerSide = 8;

int tile_extent(int extent) {
  const int even = (extent + kTilesPerSide - 1) / kTilesPerSide;
  return std::max(kMinTile, (even + 15) / 16 * 16);
}

}  // namespace

void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  const int tm = tile_extent(M), tn = tile_extent(N);
  const int rows = (M + tm - 1) / tm, cols = (N + tn - 1) / tn, tiles = rows * cols;
  auto run = [&](int t) {
    const std::int64_t i = std::int64_t(t / cols) * tm, j = std::int64_t(t % cols) * tn;
    const int m = int(std::min<std::int64_t>(tm, M - i));
    const int n = int(std::min<std::int64_t>(tn, N - j));
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, K, alpha, ta ? A + i : A + i * lda, lda,
               tb ? B + j * ldb : B + j, ldb, beta, C + i * ldc + j, ldc);
  };
  // Each call on one thread: inside a parallel region an OpenMP library would
  // otherwise still fork when that region is inactive (a team of one). The
  // setting is the region's own and ends with it.
#pragma omp parallel if (omp_get_level() == 0 && tiles > 1)
  {
    omp_set_num_threads(1);
#pragma omp for schedule(static)
    for (int t = 0; t < tiles; ++t) run(t);
  }
}

}  // namespace trident::cpu
