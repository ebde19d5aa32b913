// The ops of a block where GPT-2 and the Llama family (Touvron et al. 2023)
// differ, on this tensor rank's rows: the norm (LayerNorm, or RMSNorm: no
// mean, no bias), rotary positions on q and k, SwiGLU's gated hidden layer,
// and the shape attention sees (grouped-query heads). GptModel builds its
// GEMMs' operands around these (gpt.cpp, llama_block.cpp); a GPT-2 run never
// calls LlamaOps.
#pragma once
#include <memory>

#include "compute/backend.hpp"
#include "compute/llama_ops.hpp"
#include "model/attention_op.hpp"
#include "model/gpt_config.hpp"
#include "model/token_layout.hpp"
#include "parallel/tensor/tensor_layout.hpp"

namespace trident {

class BlockMath {
 public:
  // tokens: the micro-batch's rows (GptModelOptions::tokens), whole or not.
  BlockMath(const GptConfig& c, const TensorParallelLayout& tp, const TokenLayout& tokens,
            ComputeBackend& backend);

  // The Llama family's attention (rotary positions, or fewer key/value heads
  // than query heads): qkv as values, rotated, and attention through f32 ops
  // on values; GPT-2's runs the backend's 16-bit operand paths.
  bool llama_attention() const {
    return cfg_.positions == PositionEncoding::rope || cfg_.kv_head_count() != cfg_.heads;
  }
  AttentionShape attention_shape() const;

  // The chosen norm on the rows whose norms this rank computes (all, or its
  // slice under SP); RMSNorm ignores mean, b and db.
  void norm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                    const float* b);
  void norm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                     const float* w, const float* mean, const float* rstd);

  // RoPE on q and k of the fused qkv of every row (or, backward, its gradient
  // in place); nothing where positions are learned.
  void rotate(float* qkv, bool backward);

  // SwiGLU on every row: hidden = silu(gate) * up from fc's output [gate | up];
  // backward writes the gradient of [gate | up] from hidden's.
  void swiglu_forward(float* hidden, const float* fc_out);
  void swiglu_backward(float* d_fc_out, const float* d_hidden, const float* fc_out);

 private:
  GptConfig cfg_;
  TensorParallelLayout tp_;
  TokenLayout tokens_;
  ComputeBackend& backend_;
  LlamaOps& llama_;
  std::unique_ptr<RotaryTable> rotary_;  // rotary positions: built once
  int norm_rows_;  // this rank's rows of the residual stream
};

}  // namespace trident
