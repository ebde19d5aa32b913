// The compute seam's ops of the Llama family's block (RMSNorm, rotary
// positions, SwiGLU, grouped-query attention), beside the core of
// backend.hpp: every backend has them (ComputeBackend::llama_ops()), but a
// GPT-2 run never calls them, so the core stays GPT-2's f32 math. Same
// conventions as the core: row-major, backend memory, every backward ADDS
// into its outputs (RoPE's maps a gradient in place), null outputs skipped.
// The CPU backend runs compute/cpu/llama_kernels.hpp, the CUDA backend
// compute/cuda/llama_launch.hpp. 16-bit runs call these on f32 values that
// the model rounds as 16-bit storage would (no bf16 operands of their own).
#pragma once
#include <cstddef>
#include <memory>

namespace trident {

// A rotary table (cos and sin of positions x head_size / 2 angles) in the
// backend's memory, built once per model by LlamaOps::make_rotary_table.
class RotaryTable {
 public:
  virtual ~RotaryTable() = default;
};

class LlamaOps {
 public:
  virtual ~LlamaOps() = default;
  // RMSNorm (Zhang & Sennrich 2019): out = x * rstd * w, rstd (N) saved.
  virtual void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N,
                               int C, float eps) = 0;
  // dinp may be null (then w may be too), and dw.
  virtual void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp,
                                const float* w, const float* rstd, int N, int C) = 0;

  // Rotary positions (RoFormer; Hugging Face's "rotate_half" pairing of
  // element i with i + hs/2) for positions [0, positions).
  virtual std::unique_ptr<RotaryTable> make_rotary_table(int positions, int hs,
                                                         double theta) = 0;
  // In place on the first `heads` heads (hs each) of B * T rows ld apart,
  // token t of each row block at position pos0 + t. On the fused qkv
  // [q | k | v], heads = NH + KVH and ld = (NH + 2 KVH) hs rotate q and k.
  virtual void rope_forward(float* x, const RotaryTable& table, int B, int T, int heads, int hs,
                            std::size_t ld, int pos0) = 0;
  // The gradient of the rotated values into that of the values before, in place.
  virtual void rope_backward(float* dx, const RotaryTable& table, int B, int T, int heads,
                             int hs, std::size_t ld, int pos0) = 0;

  // SwiGLU (Shazeer 2020): rows [a | b] of inp (N, 2F) into out = silu(a) * b (N, F).
  virtual void swiglu_forward(float* out, const float* inp, int N, int F) = 0;
  virtual void swiglu_backward(float* dinp, const float* dout, const float* inp, int N,
                               int F) = 0;

  // Grouped-query causal attention (Ainslie et al. 2023) on the fused qkv
  // (B, T, (NH + 2 KVH) hs): query head h reads key/value head h / (NH / KVH).
  // out (B, T, NH hs), lse (B, NH, T) as the core's attention_forward.
  virtual void gqa_attention_forward(float* out, float* lse, const float* qkv, int B, int T,
                                     int NH, int KVH, int hs) = 0;
  virtual void gqa_attention_backward(float* dqkv, const float* dout, const float* qkv,
                                      const float* out, const float* lse, int B, int T, int NH,
                                      int KVH, int hs) = 0;
};

}  // namespace trident
