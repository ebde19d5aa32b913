// Typed row-major GEMM: C = alpha * op(A) op(B) + beta * C.
// float runs on oneDNN's JIT kernels, which read the CPU's ISA themselves at
// start-up (AVX-512, AMX, AVX2, ...); no environment variable narrows them the
// way OPENBLAS_CORETYPE narrows OpenBLAS's. double serves only the
// finite-difference tests, on small shapes: a plain loop is enough there.
#pragma once
#include <cstdint>

namespace trident::cpu {

// The tiles of an M x N product: tm x tn (the last row and column of tiles
// may be smaller), rows x cols of them, chosen from the shape alone.
struct GemmTiles {
  int tm, tn, rows, cols;
};
GemmTiles gemm_tiles(int M, int N);

// C in fixed tiles, each one single-threaded GEMM over all of K, the tiles
// spread over this rank's threads. The tiles depend on the shape only, so C
// has the same bits on any number of threads (oneDNN's own threading splits K
// for some shapes).
void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

inline void gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
                 const double* B, int ldb, double beta, double* C, int ldc) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0;
      for (int k = 0; k < K; ++k) {
        const double a = ta ? A[std::int64_t(k) * lda + i] : A[std::int64_t(i) * lda + k];
        const double b = tb ? B[std::int64_t(j) * ldb + k] : B[std::int64_t(k) * ldb + j];
        acc += a * b;
      }
      double& c = C[std::int64_t(i) * ldc + j];
      c = alpha * acc + (beta == 0 ? 0.0 : beta * c);
    }
}

}  // namespace trident::cpu
