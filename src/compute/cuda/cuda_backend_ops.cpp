// CudaBackend: the GPT block's ops. GEMMs mirror the CPU backend's calls
// (row-major, same operands); attention is in cuda_attention.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/cuda/cuda_backend.hpp"
#include "compute/cuda/launch.hpp"

namespace trident {

void CudaBackend::embedding_forward(float* out, const std::int32_t* tok, const float* wte, int lo,
                                    int count, int N, int C) {
  run("embedding_forward", [&] { gpu::embedding_forward(out, tok, wte, lo, count, N, C, stream_); });
}

void CudaBackend::embedding_forward_bits(float* out, const std::int32_t* tok,
                                         const std::uint16_t* wte, int lo, int count, int N,
                                         int C) {
  run("embedding_forward",
      [&] { gpu::embedding_forward_bits(out, tok, wte, lo, count, N, C, stream_); });
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

void CudaBackend::layernorm_forward_rounded(float* out, std::uint16_t* bits, float* mean,
                                            float* rstd, const float* inp, const float* w,
                                            const float* b, int N, int C) {
  run("layernorm_forward",
      [&] { gpu::layernorm_forward_rounded(out, bits, mean, rstd, inp, w, b, N, C, stream_); });
}

void CudaBackend::layernorm_backward(float* dinp, float* dw, float* db, const float* dout,
                                     const float* inp, const float* w, const float* mean,
                                     const float* rstd, int N, int C) {
  auto* s = static_cast<float*>(scratch(gpu::layernorm_backward_scratch(N, C) * sizeof(float)));
  run("layernorm_backward", [&] {
    gpu::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, s, stream_);
  });
}

void* CudaBackend::widen_slot(int slot, std::size_t bytes) {
  if (widen_bytes_[slot] < bytes) {
    if (widen_[slot]) cuda_check(cudaFree(widen_[slot]), site_, "cudaFree (operand copy)");
    cuda_check(cudaMalloc(&widen_[slot], bytes), site_, "cudaMalloc (operand copy)");
    widen_bytes_[slot] = bytes;
  }
  return widen_[slot];
}

const float* CudaBackend::values_of(MatrixIn m, std::size_t n, int slot) {
  if (m.values) return m.values;
  void* dst = widen_slot(slot, n * sizeof(float));
  gpu::convert(dst, gpu::kF32, m.bf16, gpu::kBF16, n, stream_);
  return static_cast<const float*>(dst);
}

const std::uint16_t* CudaBackend::bits_of(MatrixIn m, std::size_t n, int slot) {
  if (m.bf16) return m.bf16;
  if (!m.values || !m.bf16_values) return nullptr;
  void* dst = widen_slot(slot, n * sizeof(std::uint16_t));
  gpu::convert(dst, gpu::kBF16, m.values, gpu::kF32, n, stream_);  // exact: bf16 values
  return static_cast<const std::uint16_t*>(dst);
}

void CudaBackend::matmul_forward(float* out, MatrixIn inp, MatrixIn w, const float* bias, int N,
                                 int IC, int OC) {
  run("matmul_forward", [&] {
    const std::uint16_t* x16 = bits_of(inp, std::size_t(N) * IC, 2);
    const std::uint16_t* w16 = x16 ? bits_of(w, std::size_t(OC) * IC, 1) : nullptr;
    if (x16 && w16) {
      if (gemms_->linear_bf16(out, x16, w16, bias, N, IC, OC)) return;
      gemms_->gemm_bf16(false, true, N, OC, IC, x16, IC, w16, IC, 0.0f, out, OC);
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

void CudaBackend::matmul_forward_rounded(float* out, std::uint16_t* bits, MatrixIn inp,
                                         MatrixIn w, const float* bias, int N, int IC, int OC,
                                         bool values) {
  const std::uint16_t* x16 = values ? nullptr : bits_of(inp, std::size_t(N) * IC, 2);
  const std::uint16_t* w16 = x16 ? bits_of(w, std::size_t(OC) * IC, 1) : nullptr;
  if (x16 && w16 && bits) {
    bool done = false;
    run("matmul_forward", [&] {
      std::uint16_t* b16 = nullptr;  // the bias's bf16 values, as the bf16 epilogue takes them
      if (bias) {
        b16 = static_cast<std::uint16_t*>(scratch(std::size_t(OC) * sizeof(std::uint16_t)));
        gpu::convert(b16, gpu::kBF16, bias, gpu::kF32, std::size_t(OC), stream_);
      }
      done = gemms_->linear_bf16_out(bits, x16, w16, b16, N, IC, OC);
    });
    if (done) return;
  }
  Bf16Operands::matmul_forward_rounded(out, bits, inp, w, bias, N, IC, OC, values);
}

void CudaBackend::matmul_backward(float* dinp, float* dw, float* dbias, MatrixIn dout,
                                  MatrixIn inp, MatrixIn w, int N, int IC, int OC,
                                  InputGrad dinp_mode) {
  const float dinp_beta = dinp_mode == InputGrad::add ? 1.0f : 0.0f;
  float* s = dbias ? static_cast<float*>(scratch(gpu::bias_backward_scratch(N, OC) * sizeof(float)))
                   : nullptr;
  const std::size_t n_dout = std::size_t(N) * OC;
  run("matmul_backward", [&] {
    // dout feeds both products and the bias gradient: packed or widened once
    // (slot 0 holds one of the two: an operand given as bits is not packed).
    const std::uint16_t* d16 = bits_of(dout, n_dout, 0);
    const float* dv = nullptr;
    auto dout_values = [&] { return dv ? dv : (dv = values_of(dout, n_dout, 0)); };
    const std::uint16_t* w16 = dinp && d16 ? bits_of(w, std::size_t(OC) * IC, 1) : nullptr;
    const std::uint16_t* x16 = dw && d16 ? bits_of(inp, std::size_t(N) * IC, 2) : nullptr;
    if (dinp && w16)
      gemms_->gemm_bf16(false, false, N, IC, OC, d16, OC, w16, IC, dinp_beta, dinp, IC);
    else if (dinp)
      gemms_->gemm(false, false, N, IC, OC, 1.0f, dout_values(), OC,
                   values_of(w, std::size_t(OC) * IC, 1), IC, dinp_beta, dinp, IC);
    if (dw && x16)
      gemms_->gemm_bf16(true, false, OC, IC, N, d16, OC, x16, IC, 1.0f, dw, IC);
    else if (dw)
      gemms_->gemm(true, false, OC, IC, N, 1.0f, dout_values(), OC,
                   values_of(inp, std::size_t(N) * IC, 2), IC, 1.0f, dw, IC);
    // The bias gradient reads the bits where there are any (the same values).
    if (dbias && d16) gpu::bias_backward_bits(dbias, d16, N, OC, s, stream_);
    else if (dbias) gpu::bias_backward(dbias, dout_values(), N, OC, s, stream_);
  });
}

void CudaBackend::gelu_forward(float* out, const float* inp, std::size_t n) {
  run("gelu_forward", [&] { gpu::gelu_forward(out, inp, n, stream_); });
}

void CudaBackend::gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) {
  run("gelu_backward", [&] { gpu::gelu_backward(dinp, inp, dout, n, stream_); });
}

void CudaBackend::gelu_forward_rounded(float* out, std::uint16_t* bits, float* inp,
                                       std::uint16_t* inp_bits, std::size_t n, DType store) {
  const int kind = storage_kind(store);
  if (kind != gpu::kBF16 && kind != gpu::kF16)
    return Bf16Operands::gelu_forward_rounded(out, bits, inp, inp_bits, n, store);
  run("gelu_forward",
      [&] { gpu::gelu_forward_rounded(out, bits, inp, inp_bits, n, kind, stream_); });
}

void CudaBackend::gelu_backward_rounded(float* dinp, std::uint16_t* bits, float* inp,
                                        const std::uint16_t* inp_bits, float* dout,
                                        std::size_t n, DType store) {
  const int kind = storage_kind(store);
  if (kind != gpu::kBF16 && kind != gpu::kF16)
    return Bf16Operands::gelu_backward_rounded(dinp, bits, inp, inp_bits, dout, n, store);
  run("gelu_backward", [&] {
    gpu::gelu_backward_rounded(dinp, bits, inp, inp_bits, dout, n, kind, stream_);
  });
}

void CudaBackend::xent_max(float* row_max, const float* logits, int N, int V, int valid) {
  run("xent_max", [&] { gpu::xent_max(row_max, logits, N, V, valid, stream_); });
}

void CudaBackend::xent_sums(float* packed, const float* logits, const float* row_max,
                            const std::int32_t* targets, int lo, int N, int V, int valid) {
  run("xent_sums",
      [&] { gpu::xent_sums(packed, logits, row_max, targets, lo, N, V, valid, stream_); });
}

void CudaBackend::xent_stats(float* row_max, float* packed, const float* logits,
                             const std::int32_t* targets, int N, int V, int valid) {
  run("xent_stats",
      [&] { gpu::xent_stats(row_max, packed, logits, targets, N, V, valid, stream_); });
}

void CudaBackend::xent_finish(float* losses, float* dlogits, const float* logits,
                              const float* row_max, const float* packed,
                              const std::int32_t* targets, int lo, int N, int V, int valid,
                              float dloss) {
  run("xent_finish", [&] {
    gpu::xent_finish(losses, dlogits, logits, row_max, packed, targets, lo, N, V, valid, dloss,
                     false, stream_);
  });
}

void CudaBackend::xent_finish_rounded(float* losses, float* dlogits, const float* logits,
                                      const float* row_max, const float* packed,
                                      const std::int32_t* targets, int lo, int N, int V,
                                      int valid, float dloss) {
  run("xent_finish", [&] {
    gpu::xent_finish(losses, dlogits, logits, row_max, packed, targets, lo, N, V, valid, dloss,
                     true, stream_);
  });
}

void CudaBackend::adamw_spans(float* p, const float* g, float* m, float* v,
                              const AdamWSpan* spans, std::size_t count, float lr, float beta1,
                              float beta2, float eps, float wd, float bc1, float bc2,
                              float grad_scale, std::uint16_t* weights_bf16) {
  if (count == 1) {  // one array (ZeRO's shards, chunked gradients): no plan
    const AdamWSpan& sp = spans[0];
    return run("adamw", [&] {
      gpu::adamw(p + sp.offset, g + sp.offset, m + sp.offset, v + sp.offset, sp.n, lr, beta1,
                 beta2, eps, sp.decay ? wd : 0.0f, bc1, bc2, grad_scale,
                 weights_bf16 ? weights_bf16 + sp.offset : nullptr, stream_);
    });
  }
  // The spans are the same every step: the plan is made and goes over only
  // when they change.
  if (!std::equal(spans, spans + count, adamw_spans_.begin(), adamw_spans_.end(),
                  [](const AdamWSpan& a, const AdamWSpan& b) {
                    return a.offset == b.offset && a.n == b.n && a.decay == b.decay;
                  })) {
    const std::vector<gpu::AdamWChunk> plan = gpu::adamw_plan(spans, count);
    const std::size_t bytes = plan.size() * sizeof(gpu::AdamWChunk);
    if (bytes > adamw_plan_bytes_) {
      if (adamw_plan_dev_) {
        cuda_check(cudaStreamSynchronize(stream_), site_, "adamw plan (synchronize)");
        cuda_check(cudaFree(adamw_plan_dev_), site_, "cudaFree (adamw plan)");
      }
      cuda_check(cudaMalloc(&adamw_plan_dev_, bytes), site_, "cudaMalloc (adamw plan)");
      adamw_plan_bytes_ = bytes;
    }
    // Pageable memory: the copy has left the vector when this returns.
    cuda_check(cudaMemcpyAsync(adamw_plan_dev_, plan.data(), bytes, cudaMemcpyHostToDevice,
                               stream_),
               site_, "adamw plan (copy)");
    adamw_spans_.assign(spans, spans + count);
    adamw_chunks_ = plan.size();
  }
  run("adamw", [&] {  // the bf16 weights written in the same pass
    gpu::adamw_chunks(p, g, m, v, static_cast<const gpu::AdamWChunk*>(adamw_plan_dev_),
                      adamw_chunks_, lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale,
                      weights_bf16, stream_);
  });
}

}  // namespace trident
