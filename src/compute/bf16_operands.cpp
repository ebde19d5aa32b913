#include "compute/bf16_operands.hpp"

#include <stdexcept>

namespace trident {
namespace {

const float* values_of(MatrixIn m, const char* op) {
  if (!m.values && m.bf16)
    throw std::logic_error(std::string(op) + ": an operand as bf16 bits alone, on a backend "
                           "without bf16 kernels");
  return m.values;
}

}  // namespace

void Bf16Operands::round_to_bf16(float* dst, std::uint16_t* bits, const float* src,
                                 std::size_t n) {
  if (dst != src) core_.copy(dst, src, n * sizeof(float));
  core_.round_to(dst, DType::bf16, n);
  if (bits) core_.convert(bits, DType::bf16, dst, DType::f32, n);
}

void Bf16Operands::layernorm_forward_rounded(float* out, std::uint16_t* bits, float* mean,
                                             float* rstd, const float* inp, const float* w,
                                             const float* b, int N, int C) {
  core_.layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  round_to_bf16(out, bits, out, std::size_t(N) * C);
}

void Bf16Operands::matmul_forward_rounded(float* out, std::uint16_t* bits, MatrixIn inp,
                                          MatrixIn w, const float* bias, int N, int IC, int OC,
                                          bool values) {
  (void)values;
  matmul_forward(out, inp, w, bias, N, IC, OC);
  round_to_bf16(out, bits, out, std::size_t(N) * OC);
}

void Bf16Operands::attention_forward_rounded(float* out, std::uint16_t* bits, float* lse,
                                             MatrixIn qkv, int B, int T, int C, int NH) {
  attention_forward(out, lse, qkv, B, T, C, NH, true);
  round_to_bf16(out, bits, out, std::size_t(B) * T * C);
}

void Bf16Operands::attention_backward_rounded(float* dqkv, std::uint16_t* bits, MatrixIn dout,
                                              MatrixIn qkv, const float* out, const float* lse,
                                              int B, int T, int C, int NH) {
  const std::size_t n = std::size_t(B) * T * 3 * C;
  core_.zero(dqkv, n * sizeof(float));
  attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, true);
  round_to_bf16(dqkv, bits, dqkv, n);
}

void Bf16Operands::gelu_forward_rounded(float* out, std::uint16_t* bits, float* inp,
                                        std::uint16_t* inp_bits, std::size_t n, DType store) {
  if (!out) throw std::logic_error("gelu_forward_rounded: bits only is not implemented here");
  core_.round_to(inp, store, n);
  if (inp_bits) core_.convert(inp_bits, DType::bf16, inp, DType::f32, n);
  core_.gelu_forward(out, inp, n);
  if (bits) round_to_bf16(out, bits, out, n);
  else core_.round_to(out, store, n);
}

void Bf16Operands::gelu_backward_rounded(float* dinp, std::uint16_t* bits, float* inp,
                                         const std::uint16_t* inp_bits, float* dout,
                                         std::size_t n, DType store) {
  if (inp_bits) core_.convert(inp, DType::f32, inp_bits, DType::bf16, n);
  core_.round_to(dout, store, n);
  core_.zero(dinp, n * sizeof(float));
  core_.gelu_backward(dinp, inp, dout, n);
  if (bits) round_to_bf16(dinp, bits, dinp, n);
  else core_.round_to(dinp, store, n);
}

void Bf16Operands::xent_finish_rounded(float* losses, float* dlogits, const float* logits,
                                       const float* row_max, const float* packed,
                                       const std::int32_t* targets, int lo, int N, int V,
                                       int valid, float dloss) {
  core_.xent_finish(losses, dlogits, logits, row_max, packed, targets, lo, N, V, valid, dloss);
  core_.round_to(dlogits, DType::bf16, std::size_t(N) * V);
}

void RoundedBf16Operands::matmul_forward(float* out, MatrixIn inp, MatrixIn w, const float* bias,
                                         int N, int IC, int OC) {
  core_.matmul_forward(out, values_of(inp, "matmul_forward"), values_of(w, "matmul_forward"),
                       bias, N, IC, OC);
}

void RoundedBf16Operands::matmul_backward(float* dinp, float* dw, float* dbias, MatrixIn dout,
                                          MatrixIn inp, MatrixIn w, int N, int IC, int OC,
                                          InputGrad dinp_mode) {
  core_.matmul_backward(dinp, dw, dbias, values_of(dout, "matmul_backward"),
                        values_of(inp, "matmul_backward"), values_of(w, "matmul_backward"), N,
                        IC, OC, dinp_mode);
}

void RoundedBf16Operands::attention_forward(float* out, float* lse, MatrixIn qkv, int B, int T,
                                            int C, int NH, bool) {
  core_.attention_forward(out, lse, values_of(qkv, "attention_forward"), B, T, C, NH);
}

void RoundedBf16Operands::attention_backward(float* dqkv, MatrixIn dout, MatrixIn qkv,
                                             const float* out, const float* lse, int B, int T,
                                             int C, int NH, bool) {
  core_.attention_backward(dqkv, values_of(dout, "attention_backward"),
                           values_of(qkv, "attention_backward"), out, lse, B, T, C, NH);
}

void RoundedBf16Operands::embedding_forward_bits(float*, const std::int32_t*,
                                                 const std::uint16_t*, int, int, int, int) {
  throw std::logic_error("embedding_forward_bits: a bf16 table on a backend without bf16 kernels");
}

}  // namespace trident
