// The f32 GEMM of blas.hpp on bf16 kernels when every value of A and B is a
// bf16 value held in f32, as a bf16 run's weights and rounded activations
// are: on AMX tiles through amx_gemm.hpp where the CPU has them (1.5x
// oneDNN 2.6's matmul on GPT-2's linears), else on oneDNN's AVX-512 BF16
// kernels. The product of two bf16 values is exact in f32 and the sums are
// f32, so C equals the f32 GEMM's up to the rounding of its sums in another
// order. Neither path's bits depend on the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/cpu/kernel_scratch.hpp"

namespace trident::cpu {

// Whether the CPU has bf16 instructions oneDNN's kernels use.
bool cpu_has_bf16_kernels();

// C = op(A) op(B) (+ C when accumulate) with A and B as bf16 bits (A: M x K,
// ta: stored K x M; B: K x N, tb: stored N x K), f32 sums, on the calling
// thread: small products inside a parallel region, such as attention's tiles.
// Without bf16 kernels for the shape it widens them and runs the f32 GEMM.
void gemm_bf16_bits(bool ta, bool tb, int M, int N, int K, const std::uint16_t* A, int lda,
                    const std::uint16_t* B, int ldb, bool accumulate, float* C, int ldc);

// A GEMM operand: its bf16 bits (read as they are, with the caller's leading
// dimension), else f32 values that hold bf16 values (packed first).
struct Bf16Operand {
  const float* values;
  const std::uint16_t* bits;
};

// C = op(A) op(B) (+ C when accumulate; + bias, a row of N added to each row
// of C as add_bias adds it, when not) on bf16 kernels (oneDNN's in fixed row
// tiles chosen from M alone, one thread each); returns false, having done nothing,
// when the CPU has no bf16 instructions, oneDNN none for the shape, or values
// hold a value bf16 cannot represent.
bool gemm_bf16(bool ta, bool tb, int M, int N, int K, Bf16Operand A, int lda, Bf16Operand B,
               int ldb, bool accumulate, float* C, int ldc, const float* bias = nullptr);

// x (rows x cols, leading dimension ld) as contiguous bf16 bits; false when
// it holds a value bf16 cannot represent.
bool pack_bf16_values(ScratchVector<std::uint16_t>& out, const float* x, int rows, int cols, int ld);

// C = alpha * op(A) op(B) + beta * C on bf16 kernels; returns false, having
// done nothing, when alpha is not 1, beta is neither 0 nor 1, the CPU has no
// bf16 instructions or A or B holds a value bf16 cannot represent (the caller
// then runs gemm()).
bool gemm_bf16_valued(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc);

// Whether each value of the rows x cols matrix x (leading dimension ld) is a
// bf16 value: its low 16 bits are zero. Stops at the first that is not.
bool holds_bf16_values(const float* x, int rows, int cols, int ld);

}  // namespace trident::cpu
