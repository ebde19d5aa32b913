#include "compute/cpu/blas.hpp"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>

namespace trident::cpu {
namespace {

// Tiles of C no smaller than kMinTile on a side (a GEMM on a thinner tile
// repacks the other operand too often), at most 8 per side: up to 64 tiles to
// spread. A C too small for kFewTiles such tiles (a micro-batch of a few
// hundred tokens) takes tiles of kSmallTile, so a rank's threads share it; the
// choice reads the shape only, never the thread count.
constexpr int kMinTile = 256;
constexpr int kSmallTile = 128;
constexpr int kFewTiles = 4;
constexpr int kTilesPerSide = 8;

int tile_extent(int extent, int min_tile) {
  const int even = (extent + kTilesPerSide - 1) / kTilesPerSide;
  return std::max(min_tile, (even + 15) / 16 * 16);
}

int tile_count(int M, int N, int min_tile) {
  const int tm = tile_extent(M, min_tile), tn = tile_extent(N, min_tile);
  return ((M + tm - 1) / tm) * ((N + tn - 1) / tn);
}

}  // namespace

GemmTiles gemm_tiles(int M, int N) {
  const int min_tile = tile_count(M, N, kMinTile) < kFewTiles ? kSmallTile : kMinTile;
  GemmTiles g;
  g.tm = tile_extent(M, min_tile);
  g.tn = tile_extent(N, min_tile);
  g.rows = (M + g.tm - 1) / g.tm;
  g.cols = (N + g.tn - 1) / g.tn;
  return g;
}

void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  const GemmTiles g = gemm_tiles(M, N);
  const int tm = g.tm, tn = g.tn, cols = g.cols, tiles = g.rows * g.cols;
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
