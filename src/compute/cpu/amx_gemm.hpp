// A bf16 GEMM on AMX tiles (Sapphire Rapids and later Xeons): both operands
// packed into tile layouts, C in 32 x 32 blocks of four accumulator tiles,
// cache blocks sized to the core's L1 (a 32-row panel of A) and L2 (a column
// chunk of B). oneDNN 2.6's AMX matmul reaches 0.5-0.8 TFLOP/s per core on
// the decks' shapes; the tile unit does 3.4 (perf/RESULTS.md).
//
// Every entry of C is summed the same way whatever the thread count and
// blocking: C's start value (0, or C when accumulating), then the products in
// steps of 32 along K, in order, on the tile unit. A bias row is added after
// the sums, as add_bias adds it.
#pragma once

#include <cstdint>

namespace trident::cpu {

// Whether the CPU has AMX bf16 tiles (and AVX-512 with its bf16
// conversions), the kernel lets this process use them, and TRIDENT_AMX is
// not "0".
bool amx_available();

// One core's tile unit, measured: FLOP/s of back-to-back bf16 tile products
// on tiles already loaded, the best of a few ~5 ms rounds; no GEMM that
// loads its operands runs faster. 0 without AMX.
double amx_tile_flops();

// C (M x N, leading dimension ldc) = op(A) op(B) (+ C when accumulate; + bias,
// a row of N, when bias is not null) from bf16 bits: A is M x K (ta: stored
// K x M), B is K x N (tb: stored N x K). `parallel` spreads C's row panels
// over the OpenMP threads; otherwise the calling thread does it all.
void amx_gemm(bool ta, bool tb, int M, int N, int K, const std::uint16_t* A, int lda,
              const std::uint16_t* B, int ldb, bool accumulate, float* C, int ldc,
              const float* bias, bool parallel);

}  // namespace trident::cpu
