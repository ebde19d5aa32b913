// CudaBackend: the GPT block's ops. GEMMs mirror the CPU backend's calls
// (row-major, same operands); attention runs its GEMMs batched over heads on
// strided views of qkv, with the masked softmax as one fused kernel between.
#include <cmath>

#include "compute/cuda/cuda_backend.hpp"
#include "compute/cuda/launch.hpp"

namespace trident {

void CudaBackend::embedding_forward(float* out, const std::int32_t* tok, const float* wte, int lo,
                                    int count, int N, int C) {
  run("embedding_forward", [&] { gpu::embedding_forward(out, tok, wte, lo, count, N, C, stream_); });
}

void CudaBackend::embedding_backward(float* dwte, const float* dout, const std::int32_t* tok,
                                     int lo, int count, int N, int C) {
  run("embedding_backward",
      [&] { gpu::embedding_backward(dwte, dout, tok, lo, count, N, C, stream_); });
}

void CudaBackend::position_forward(float* out, const float* wpe, int N, int T, int first, int C) {
  run("position_forward", [&] { gpu::position_forward(out, wpe, N, T, first, C, stream_); });
}

void CudaBackend::position_backward(float* dwpe, const float* dout, int N, int T, int first,
                                    int C) {
  run("position_backward", [&] { gpu::position_backward(dwpe, dout, N, T, first, C, stream_); });
}

void CudaBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                    const float* w, const float* b, int N, int C) {
  run("layernorm_forward",
      [&] { gpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C, stream_); });
}

void CudaBackend::layernorm_backward(float* dinp, float* dw, float* db, const float* dout,
                                     const float* inp, const float* w, const float* mean,
                                     const float* rstd, int N, int C) {
  auto* s = static_cast<float*>(scratch(gpu::layernorm_backward_scratch(N, C) * sizeof(float)));
  run("layernorm_backward", [&] {
    gpu::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, s, stream_);
  });
}

const float* CudaBackend::values_of(MatrixIn m, std::size_t n, int slot) {
  if (m.values) return m.values;
  if (widen_bytes_[slot] < n * sizeof(float)) {
    if (widen_[slot]) cuda_check(cudaFree(widen_[slot]), site_, "cudaFree (widened operand)");
    cuda_check(cudaMalloc(&widen_[slot], n * sizeof(float)), site_, "cudaMalloc (widened operand)");
    widen_bytes_[slot] = n * sizeof(float);
  }
  gpu::convert(widen_[slot], gpu::kF32, m.bf16, gpu::kBF16, n, stream_);
  return static_cast<const float*>(widen_[slot]);
}

void CudaBackend::matmul_forward(float* out, MatrixIn inp, MatrixIn w, const float* bias, int N,
                                 int IC, int OC) {
  run("matmul_forward", [&] {
    if (inp.bf16 && w.bf16) {
      gemms_->gemm_bf16(false, true, N, OC, IC, inp.bf16, IC, w.bf16, IC, 0.0f, out, OC);
      if (bias) gpu::add_bias(out, bias, N, OC, stream_);
      return;
    }
    const float* x = values_of(inp, std::size_t(N) * IC, 2);
    const float* wv = values_of(w, std::size_t(OC) * IC, 1);
    if (gemms_->linear(out, x, wv, bias, N, IC, OC)) return;
    gemms_->gemm(false, true, N, OC, IC, 1.0f, x, IC, wv, IC, 0.0f, out, OC);
    if (bias) gpu::add_bias(out, bias, N, OC, stream_);
  });
}

void CudaBackend::matmul_backward(float* dinp, float* dw, float* dbias, MatrixIn dout,
                                  MatrixIn inp, MatrixIn w, int N, int IC, int OC,
                                  InputGrad dinp_mode) {
  const float dinp_beta = dinp_mode == InputGrad::add ? 1.0f : 0.0f;
  float* s = dbias ? static_cast<float*>(scratch(gpu::bias_backward_scratch(N, OC) * sizeof(float)))
                   : nullptr;
  const std::size_t n_dout = std::size_t(N) * OC;
  run("matmul_backward", [&] {
    if (dinp && dout.bf16 && w.bf16)
      gemms_->gemm_bf16(false, false, N, IC, OC, dout.bf16, OC, w.bf16, IC, dinp_beta, dinp, IC);
    else if (dinp)
      gemms_->gemm(false, false, N, IC, OC, 1.0f, values_of(dout, n_dout, 0), OC,
                   values_of(w, std::size_t(OC) * IC, 1), IC, dinp_beta, dinp, IC);
    if (dw && dout.bf16 && inp.bf16)
      gemms_->gemm_bf16(true, false, OC, IC, N, dout.bf16, OC, inp.bf16, IC, 1.0f, dw, IC);
    else if (dw)
      gemms_->gemm(true, false, OC, IC, N, 1.0f, values_of(dout, n_dout, 0), OC,
                   values_of(inp, std::size_t(N) * IC, 2), IC, 1.0f, dw, IC);
    if (dbias) gpu::bias_backward(dbias, values_of(dout, n_dout, 0), N, OC, s, stream_);
  });
}

// Per sequence b, one strided-batched GEMM over the NH heads: head h's q, k, v
// start hs columns after head h-1's in the (T, 3C) rows of qkv, its scores
// T*T after in the probabilities, its output hs columns after in (T, C). The
// probabilities of one sequence live in the backend's scratch for the op
// only; what crosses the seam is the log-sum-exp, from which backward
// rebuilds them (a GEMM and an element-wise pass instead of keeping T*T).
// bf16 is not used: the tile products run in f32 (see backend.hpp).
void CudaBackend::attention_forward(float* out, float* lse, MatrixIn qkv_m, int B, int T, int C,
                                    int NH, bool /*bf16*/) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  const long long TT = (long long)T * T;
  float* P = static_cast<float*>(scratch(std::size_t(NH) * TT * sizeof(float)));
  run("attention_forward", [&] {
    const float* qkv = values_of(qkv_m, std::size_t(B) * T * C3, 0);
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

void CudaBackend::attention_backward(float* dqkv, MatrixIn dout_m, MatrixIn qkv_m,
                                     const float* out, const float* lse, int B, int T, int C,
                                     int NH, bool /*bf16*/) {
  (void)out;  // the softmax backward takes rowsum(P * dP), which equals dO . O
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

void CudaBackend::gelu_forward(float* out, const float* inp, std::size_t n) {
  run("gelu_forward", [&] { gpu::gelu_forward(out, inp, n, stream_); });
}

void CudaBackend::gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) {
  run("gelu_backward", [&] { gpu::gelu_backward(dinp, inp, dout, n, stream_); });
}

void CudaBackend::xent_max(float* row_max, const float* logits, int N, int V, int valid) {
  run("xent_max", [&] { gpu::xent_max(row_max, logits, N, V, valid, stream_); });
}

void CudaBackend::xent_sums(float* packed, const float* logits, const float* row_max,
                            const std::int32_t* targets, int lo, int N, int V, int valid) {
  run("xent_sums",
      [&] { gpu::xent_sums(packed, logits, row_max, targets, lo, N, V, valid, stream_); });
}

void CudaBackend::xent_finish(float* losses, float* dlogits, const float* logits,
                              const float* row_max, const float* packed,
                              const std::int32_t* targets, int lo, int N, int V, int valid,
                              float dloss) {
  run("xent_finish", [&] {
    gpu::xent_finish(losses, dlogits, logits, row_max, packed, targets, lo, N, V, valid, dloss,
                     stream_);
  });
}

}  // namespace trident
