// The CPU backend's 16-bit operand ops (Bf16Operands): GEMMs and attention
// tiles on bf16 kernels (oneDNN bf16, AMX tiles) reading bits where they are
// given, and GELU and rounding fused with writing the bits. The backend
// offers them only where the CPU has bf16 instructions.
#pragma once
#include "compute/bf16_operands.hpp"

namespace trident::cpu {

class CpuBf16Operands final : public Bf16Operands {
 public:
  using Bf16Operands::Bf16Operands;
  void matmul_forward(float* out, MatrixIn inp, MatrixIn w, const float* bias, int N, int IC,
                      int OC) override;
  void matmul_backward(float* dinp, float* dw, float* dbias, MatrixIn dout, MatrixIn inp,
                       MatrixIn w, int N, int IC, int OC, InputGrad dinp_mode) override;
  void attention_forward(float* out, float* lse, MatrixIn qkv, int B, int T, int C, int NH,
                         bool bf16) override;
  void attention_backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out,
                          const float* lse, int B, int T, int C, int NH, bool bf16) override;
  void embedding_forward_bits(float* out, const std::int32_t* tokens, const std::uint16_t* wte,
                              int lo, int count, int N, int C) override;
  void round_to_bf16(float* dst, std::uint16_t* bits, const float* src, std::size_t n) override;
  void gelu_forward_rounded(float* out, std::uint16_t* bits, float* inp, std::uint16_t* inp_bits,
                            std::size_t n, DType store) override;
  void gelu_backward_rounded(float* dinp, std::uint16_t* bits, float* inp,
                             const std::uint16_t* inp_bits, float* dout, std::size_t n,
                             DType store) override;
};

}  // namespace trident::cpu
