#include "compute/cpu/cpu_bf16_operands.hpp"

#include "compute/cpu/gelu_bf16.hpp"
#include "compute/cpu/half_convert.hpp"
#include "compute/cpu/kernels.hpp"
#include "compute/cpu/linear.hpp"

namespace trident::cpu {

void CpuBf16Operands::matmul_forward(float* out, MatrixIn inp, MatrixIn w, const float* bias,
                                     int N, int IC, int OC) {
  linear_forward(out, inp, w, bias, N, IC, OC);
}

void CpuBf16Operands::matmul_backward(float* dinp, float* dw, float* dbias, MatrixIn dout,
                                      MatrixIn inp, MatrixIn w, int N, int IC, int OC,
                                      InputGrad dinp_mode) {
  linear_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC, dinp_mode);
}

void CpuBf16Operands::attention_forward(float* out, float* lse, MatrixIn qkv, int B, int T,
                                        int C, int NH, bool bf16) {
  cpu::attention_forward(out, lse, qkv.values, B, T, C, NH, bf16, qkv.bf16);
}

void CpuBf16Operands::attention_backward(float* dqkv, MatrixIn dout, MatrixIn qkv,
                                         const float* out, const float* lse, int B, int T, int C,
                                         int NH, bool bf16) {
  cpu::attention_backward(dqkv, dout.values, qkv.values, out, lse, B, T, C, NH, bf16, qkv.bf16,
                          dout.bf16);
}

void CpuBf16Operands::embedding_forward_bits(float* out, const std::int32_t* tokens,
                                             const std::uint16_t* wte, int lo, int count, int N,
                                             int C) {
  cpu::embedding_forward_bits(out, tokens, wte, lo, count, N, C);
}

void CpuBf16Operands::round_to_bf16(float* dst, std::uint16_t* bits, const float* src,
                                    std::size_t n) {
  if (!bits) return Bf16Operands::round_to_bf16(dst, bits, src, n);  // copy and round
  cpu::round_to_bf16(dst, bits, src, n);
}

void CpuBf16Operands::gelu_forward_rounded(float* out, std::uint16_t* bits, float* inp,
                                           std::uint16_t* inp_bits, std::size_t n, DType store) {
  if (store != DType::bf16)
    return Bf16Operands::gelu_forward_rounded(out, bits, inp, inp_bits, n, store);
  gelu_forward_bf16(out, bits, inp, inp_bits, n);
}

void CpuBf16Operands::gelu_backward_rounded(float* dinp, std::uint16_t* bits, float* inp,
                                            const std::uint16_t* inp_bits, float* dout,
                                            std::size_t n, DType store) {
  if (store != DType::bf16)
    return Bf16Operands::gelu_backward_rounded(dinp, bits, inp, inp_bits, dout, n, store);
  gelu_backward_bf16(dinp, bits, inp, inp_bits, dout, n);
}

}  // namespace trident::cpu
