// CudaBackend's causal attention. Per sequence b, one strided-batched GEMM
// over the NH heads: head h's q, k, v start hs columns after head h-1's in
// the (T, 3C) rows of qkv, its scores T*T after in the probabilities, its
// output hs columns after in (T, C); the masked softmax is one fused kernel
// between. The probabilities of one sequence live in the backend's scratch
// for the op only; what crosses the seam is the log-sum-exp, from which
// backward rebuilds them (a GEMM and an element-wise pass, not T*T kept).
// bf16 runs: q, k, v and dout are bf16 values, and the probabilities and
// score gradients are rounded to bf16 for the products, which run on bf16
// tensor cores with f32 sums (as the seam's bf16 attention defines; the CPU
// rounds the unnormalised tile probabilities, this the normalised ones).
#include <cmath>

#include "compute/cuda/cuda_backend.hpp"
#include "compute/cuda/launch.hpp"

namespace trident {
namespace {

MatrixIn as_bf16_values(MatrixIn m) {
  m.bf16_values = true;
  return m;
}

}  // namespace

void CudaBackend::attention_forward(float* out, float* lse, MatrixIn qkv_m, int B, int T, int C,
                                    int NH, bool bf16) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  const long long TT = (long long)T * T;
  const std::size_t n_qkv = std::size_t(B) * T * C3, n_att = std::size_t(NH) * TT;
  float* P = static_cast<float*>(scratch(n_att * sizeof(float)));
  run("attention_forward", [&] {
    if (bf16) {
      const std::uint16_t* qkv = bits_of(as_bf16_values(qkv_m), n_qkv, 0);
      auto* P16 = static_cast<std::uint16_t*>(widen_slot(2, n_att * sizeof(std::uint16_t)));
      for (int b = 0; b < B; ++b) {
        const std::uint16_t* q = qkv + std::size_t(b) * T * C3;
        gemms_->gemm_strided_bf16(false, true, T, T, hs, scale, q, C3, hs, q + C, C3, hs, 0.0f, P,
                                  T, TT, NH);  // S = scale Q K^T
        gpu::causal_softmax_forward(P, lse + std::size_t(b) * NH * T, std::size_t(NH) * T, T,
                                    stream_, P16);
        gemms_->gemm_strided_bf16(false, false, T, hs, T, 1.0f, P16, T, TT, q + 2 * C, C3, hs,
                                  0.0f, out + std::size_t(b) * T * C, C, hs, NH);  // O = P V
      }
      return;
    }
    const float* qkv = values_of(qkv_m, n_qkv, 0);
    for (int b = 0; b < B; ++b) {
      const float* q = qkv + std::size_t(b) * T * C3;
      gemms_->gemm_strided(false, true, T, T, hs, scale, q, C3, hs, q + C, C3, hs, 0.0f, P, T, TT,
                           NH);  // S = scale Q K^T
      gpu::causal_softmax_forward(P, lse + std::size_t(b) * NH * T, std::size_t(NH) * T, T,
                                  stream_);
      gemms_->gemm_strided(false, false, T, hs, T, 1.0f, P, T, TT, q + 2 * C, C3, hs, 0.0f,
                           out + std::size_t(b) * T * C, C, hs, NH);  // O = P V
    }
  });
}

// The bf16 backward: the probabilities and score gradients rounded to bf16
// copies (P16, dS16) for the products that read them.
void CudaBackend::attention_backward_bf16(float* dqkv, MatrixIn dout_m, MatrixIn qkv_m,
                                          const float* lse, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  const long long TT = (long long)T * T;
  const std::size_t n_att = std::size_t(NH) * TT;
  float* P = static_cast<float*>(scratch(2 * n_att * sizeof(float)));
  float* dP = P + n_att;
  const std::uint16_t* qkv = bits_of(as_bf16_values(qkv_m), std::size_t(B) * T * C3, 0);
  const std::uint16_t* dout = bits_of(as_bf16_values(dout_m), std::size_t(B) * T * C, 1);
  auto* P16 = static_cast<std::uint16_t*>(widen_slot(2, 2 * n_att * sizeof(std::uint16_t)));
  std::uint16_t* dS16 = P16 + n_att;
  for (int b = 0; b < B; ++b) {
    const std::uint16_t *q = qkv + std::size_t(b) * T * C3, *k = q + C, *v = q + 2 * C;
    const std::uint16_t* dO = dout + std::size_t(b) * T * C;
    float *dq = dqkv + std::size_t(b) * T * C3, *dk = dq + C, *dv = dq + 2 * C;
    gemms_->gemm_strided_bf16(false, true, T, T, hs, scale, q, C3, hs, k, C3, hs, 0.0f, P, T, TT,
                              NH);  // S = scale Q K^T, again
    gpu::causal_softmax_recompute(P, lse + std::size_t(b) * NH * T, std::size_t(NH) * T, T,
                                  stream_, P16);
    gemms_->gemm_strided_bf16(false, true, T, T, hs, 1.0f, dO, C, hs, v, C3, hs, 0.0f, dP, T, TT,
                              NH);  // dP = dO V^T
    gemms_->gemm_strided_bf16(true, false, T, hs, T, 1.0f, P16, T, TT, dO, C, hs, 1.0f, dv, C3,
                              hs, NH);  // dV += P^T dO
    gpu::causal_softmax_backward(dP, P, std::size_t(NH) * T, T, stream_, dS16);  // dS's bits
    gemms_->gemm_strided_bf16(false, false, T, hs, T, scale, dS16, T, TT, k, C3, hs, 1.0f, dq, C3,
                              hs, NH);  // dQ += scale dS K
    gemms_->gemm_strided_bf16(true, false, T, hs, T, scale, dS16, T, TT, q, C3, hs, 1.0f, dk, C3,
                              hs, NH);  // dK += scale dS^T Q
  }
}

void CudaBackend::attention_backward(float* dqkv, MatrixIn dout_m, MatrixIn qkv_m,
                                     const float* out, const float* lse, int B, int T, int C,
                                     int NH, bool bf16) {
  (void)out;  // the softmax backward takes rowsum(P * dP), which equals dO . O
  if (bf16) {
    run("attention_backward",
        [&] { attention_backward_bf16(dqkv, dout_m, qkv_m, lse, B, T, C, NH); });
    return;
  }
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  const long long TT = (long long)T * T;
  float* P = static_cast<float*>(scratch(2 * std::size_t(NH) * TT * sizeof(float)));
  float* dP = P + std::size_t(NH) * TT;
  run("attention_backward", [&] {
    const float* dout = values_of(dout_m, std::size_t(B) * T * C, 1);
    const float* qkv = values_of(qkv_m, std::size_t(B) * T * C3, 0);
    for (int b = 0; b < B; ++b) {
      const float *q = qkv + std::size_t(b) * T * C3, *k = q + C, *v = q + 2 * C;
      float *dq = dqkv + std::size_t(b) * T * C3, *dk = dq + C, *dv = dq + 2 * C;
      const float* dO = dout + std::size_t(b) * T * C;
      gemms_->gemm_strided(false, true, T, T, hs, scale, q, C3, hs, k, C3, hs, 0.0f, P, T, TT,
                           NH);  // S = scale Q K^T, again
      gpu::causal_softmax_recompute(P, lse + std::size_t(b) * NH * T, std::size_t(NH) * T, T,
                                    stream_);
      gemms_->gemm_strided(false, true, T, T, hs, 1.0f, dO, C, hs, v, C3, hs, 0.0f, dP, T, TT,
                           NH);  // dP = dO V^T
      gemms_->gemm_strided(true, false, T, hs, T, 1.0f, P, T, TT, dO, C, hs, 1.0f, dv, C3, hs,
                           NH);  // dV += P^T dO
      gpu::causal_softmax_backward(dP, P, std::size_t(NH) * T, T, stream_);  // dP -> dS
      gemms_->gemm_strided(false, false, T, hs, T, scale, dP, T, TT, k, C3, hs, 1.0f, dq, C3, hs,
                           NH);  // dQ += scale dS K
      gemms_->gemm_strided(true, false, T, hs, T, scale, dP, T, TT, q, C3, hs, 1.0f, dk, C3, hs,
                           NH);  // dK += scale dS^T Q
    }
  });
}

}  // namespace trident
