// CudaBackend's causal attention. bf16 runs whose head size the flash
// kernels take (32, 64, 128) run them (flash_attention.cu): no T x T matrix
// in device memory. Otherwise, per sequence b, one strided-batched GEMM over
// the NH heads: head h's q, k, v start hs columns after head h-1's in the
// (T, 3C) rows of qkv, its scores T*T after in the probabilities, its output
// hs columns after in (T, C); the masked softmax is one fused kernel between.
// The probabilities of one sequence live in the backend's scratch for the op
// only; what crosses the seam is the log-sum-exp, from which backward
// rebuilds them. bf16 runs: q, k, v and dout are bf16 values, and the
// probabilities and score gradients are rounded to bf16 for the products,
// which run on bf16 tensor cores with f32 sums (as the seam's bf16 attention
// defines; the flash kernels and the CPU round the unnormalised tile
// probabilities, the GEMM path the normalised ones).
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "compute/cuda/attention_block_launch.hpp"
#include "compute/cuda/cuda_backend.hpp"
#include "compute/cuda/launch.hpp"

namespace trident {
namespace {

// One sequence's heads at a time. E is the products' operand type: f32
// values, or bf16 bits; with bits, the softmax kernels also write the
// probabilities' and score gradients' bits (p_bits, ds_bits) and the products
// read those (Pe, dSe), else Pe and dSe are P and dP themselves.
template <class E>
void forward_passes(Gemms& g, cudaStream_t s, float* out, float* lse, const E* qkv, float* P,
                    const E* Pe, std::uint16_t* p_bits, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  const long long TT = (long long)T * T;
  for (int b = 0; b < B; ++b) {
    const E* q = qkv + std::size_t(b) * T * C3;
    g.gemm_strided(false, true, T, T, hs, scale, q, C3, hs, q + C, C3, hs, 0.0f, P, T, TT,
                   NH);  // S = scale Q K^T
    gpu::causal_softmax_forward(P, lse + std::size_t(b) * NH * T, std::size_t(NH) * T, T, s,
                                p_bits);
    g.gemm_strided(false, false, T, hs, T, 1.0f, Pe, T, TT, q + 2 * C, C3, hs, 0.0f,
                   out + std::size_t(b) * T * C, C, hs, NH);  // O = P V
  }
}

template <class E>
void backward_passes(Gemms& g, cudaStream_t s, float* dqkv, const E* qkv, const E* dout,
                     const float* lse, float* P, float* dP, const E* Pe, const E* dSe,
                     std::uint16_t* p_bits, std::uint16_t* ds_bits, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  const long long TT = (long long)T * T;
  for (int b = 0; b < B; ++b) {
    const E *q = qkv + std::size_t(b) * T * C3, *k = q + C, *v = q + 2 * C;
    const E* dO = dout + std::size_t(b) * T * C;
    float *dq = dqkv + std::size_t(b) * T * C3, *dk = dq + C, *dv = dq + 2 * C;
    g.gemm_strided(false, true, T, T, hs, scale, q, C3, hs, k, C3, hs, 0.0f, P, T, TT,
                   NH);  // S = scale Q K^T, again
    gpu::causal_softmax_recompute(P, lse + std::size_t(b) * NH * T, std::size_t(NH) * T, T, s,
                                  p_bits);
    g.gemm_strided(false, true, T, T, hs, 1.0f, dO, C, hs, v, C3, hs, 0.0f, dP, T, TT,
                   NH);  // dP = dO V^T
    g.gemm_strided(true, false, T, hs, T, 1.0f, Pe, T, TT, dO, C, hs, 1.0f, dv, C3, hs,
                   NH);  // dV += P^T dO
    gpu::causal_softmax_backward(dP, P, std::size_t(NH) * T, T, s, ds_bits);  // dP -> dS
    g.gemm_strided(false, false, T, hs, T, scale, dSe, T, TT, k, C3, hs, 1.0f, dq, C3, hs,
                   NH);  // dQ += scale dS K
    g.gemm_strided(true, false, T, hs, T, scale, dSe, T, TT, q, C3, hs, 1.0f, dk, C3, hs,
                   NH);  // dK += scale dS^T Q
  }
}

// The flash kernels read 16-byte pieces of rows: they need those aligned.
bool flash_operands(int C, int NH, const std::uint16_t* a, const std::uint16_t* b = nullptr) {
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return gpu::flash_attention_fits(C, NH) && C % 8 == 0 && aligned(a) && aligned(b);
}

}  // namespace

void CudaBackend::attention_forward(float* out, float* lse, MatrixIn qkv, int B, int T, int C,
                                    int NH, bool bf16) {
  const std::size_t n_qkv = std::size_t(B) * T * 3 * C, n_att = std::size_t(NH) * T * T;
  run("attention_forward", [&] {
    const std::uint16_t* q16 = bf16 ? bits_of(qkv.as_bf16_values(), n_qkv, 0) : nullptr;
    if (q16 && flash_operands(C, NH, q16))
      return gpu::flash_attention_forward(out, lse, q16, B, T, C, NH, false, nullptr, stream_);
    float* P = static_cast<float*>(scratch(n_att * sizeof(float)));
    if (!q16)
      return forward_passes(*gemms_, stream_, out, lse, values_of(qkv, n_qkv, 0), P, P, nullptr,
                            B, T, C, NH);
    auto* P16 = static_cast<std::uint16_t*>(widen_slot(2, n_att * sizeof(std::uint16_t)));
    forward_passes(*gemms_, stream_, out, lse, q16, P, P16, P16, B, T, C, NH);
  });
}

void CudaBackend::attention_backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out,
                                     const float* lse, int B, int T, int C, int NH, bool bf16) {
  const std::size_t n_qkv = std::size_t(B) * T * 3 * C, n_out = std::size_t(B) * T * C;
  const std::size_t n_att = std::size_t(NH) * T * T;
  run("attention_backward", [&] {
    const std::uint16_t* q16 = bf16 ? bits_of(qkv.as_bf16_values(), n_qkv, 0) : nullptr;
    const std::uint16_t* d16 = bf16 ? bits_of(dout.as_bf16_values(), n_out, 1) : nullptr;
    if (q16 && flash_operands(C, NH, q16, d16)) {
      // D_t = dO_t . O_t from the f32 values, as the CPU computes it.
      auto* dots = static_cast<float*>(scratch(std::size_t(B) * NH * T * sizeof(float)));
      return gpu::flash_attention_backward(dqkv, q16, d16, values_of(dout, n_out, 2), out, lse,
                                           dots, B, T, C, NH, false, nullptr, stream_);
    }
    float* P = static_cast<float*>(scratch(2 * n_att * sizeof(float)));
    float* dP = P + n_att;
    if (!q16)
      return backward_passes(*gemms_, stream_, dqkv, values_of(qkv, n_qkv, 0),
                             values_of(dout, n_out, 1), lse, P, dP, P, dP, nullptr, nullptr, B,
                             T, C, NH);
    auto* P16 = static_cast<std::uint16_t*>(widen_slot(2, 2 * n_att * sizeof(std::uint16_t)));
    std::uint16_t* dS16 = P16 + n_att;
    backward_passes(*gemms_, stream_, dqkv, q16, d16, lse, P, dP, P16, dS16, P16, dS16, B, T, C,
                    NH);
  });
}

// The flash kernels round their outputs where they write them; other
// shapes, and operands not given as aligned bits, take the passes.
void CudaBackend::attention_forward_rounded(float* out, std::uint16_t* bits, float* lse,
                                            MatrixIn qkv, int B, int T, int C, int NH) {
  if (!qkv.bf16 || !flash_operands(C, NH, qkv.bf16))
    return Bf16Operands::attention_forward_rounded(out, bits, lse, qkv, B, T, C, NH);
  run("attention_forward", [&] {
    gpu::flash_attention_forward(out, lse, qkv.bf16, B, T, C, NH, true, bits, stream_);
  });
}

void CudaBackend::attention_backward_rounded(float* dqkv, std::uint16_t* bits, MatrixIn dout,
                                             MatrixIn qkv, const float* out, const float* lse,
                                             int B, int T, int C, int NH) {
  if (!qkv.bf16 || !dout.bf16 || !dout.values || !flash_operands(C, NH, qkv.bf16, dout.bf16))
    return Bf16Operands::attention_backward_rounded(dqkv, bits, dout, qkv, out, lse, B, T, C,
                                                      NH);
  auto* dots = static_cast<float*>(scratch(std::size_t(B) * NH * T * sizeof(float)));
  run("attention_backward", [&] {
    gpu::flash_attention_backward(dqkv, qkv.bf16, dout.bf16, dout.values, out, lse, dots, B, T,
                                  C, NH, true, bits, stream_);
  });
}

// Ring attention's blocks (context parallelism): the simple f32 kernels.
void CudaBackend::attention_block_forward(const AttentionBlock& b) {
  if (!gpu::attention_block_fits(b.width, b.heads))
    throw std::invalid_argument("attention_block_forward: head size above the kernels' 256");
  run("attention_block_forward", [&] { gpu::attention_block_forward(b, stream_); });
}

void CudaBackend::attention_block_backward(const AttentionBlock& b, const AttentionBlockGrads& g) {
  if (!gpu::attention_block_fits(b.width, b.heads))
    throw std::invalid_argument("attention_block_backward: head size above the kernels' 256");
  run("attention_block_backward", [&] { gpu::attention_block_backward(b, g, stream_); });
}

}  // namespace trident
