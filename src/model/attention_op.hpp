// Causal self-attention as the model calls it: forward from a block's qkv,
// backward to qkv's gradient. The model is given one (GptModelOptions::
// attention); the default runs the compute backend's kernels on this rank's
// heads and tokens. Another parallelism of the sequence (context parallelism:
// ring attention over a context group) is another implementation.
#pragma once
#include <cstddef>
#include <cstdint>

#include "compute/bf16_operands.hpp"
#include "compute/llama_ops.hpp"

namespace trident {

// One micro-batch's attention on this rank: batch x seq_len queries, `heads`
// query heads spanning `width` features and kv_heads key/value heads of the
// same size (q, k and v side by side in qkv; 0: as many as query heads).
struct AttentionShape {
  int batch = 0, seq_len = 0, width = 0, heads = 0, kv_heads = 0;
  // Fewer key/value heads than query heads (grouped-query attention).
  bool grouped() const { return kv_heads > 0 && kv_heads != heads; }
  int head_size() const { return width / heads; }
  std::size_t qkv_elements() const {
    const int kv = kv_heads > 0 ? kv_heads : heads;
    return std::size_t(batch) * seq_len * std::size_t(heads + 2 * kv) * head_size();
  }
};

class AttentionOp {
 public:
  virtual ~AttentionOp() = default;
  // out = attention(qkv), lse the log-sum-exp per query and head; bf16: qkv
  // holds bf16 values (see Bf16Operands::attention_forward).
  virtual void forward(float* out, float* lse, MatrixIn qkv, const AttentionShape& s,
                       bool bf16) = 0;
  // dqkv += the gradient from dout (recomputing the probabilities from lse).
  virtual void backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out,
                        const float* lse, const AttentionShape& s, bool bf16) = 0;
  // bf16 runs whose results feed bf16 GEMMs: out or dqkv (written, not added
  // to) rounded to bf16 values, and their bits where `bits` is not null.
  virtual void forward_rounded(float* out, std::uint16_t* bits, float* lse, MatrixIn qkv,
                               const AttentionShape& s) = 0;
  virtual void backward_rounded(float* dqkv, std::uint16_t* bits, MatrixIn dout, MatrixIn qkv,
                                const float* out, const float* lse, const AttentionShape& s) = 0;
};

// The backend's kernels, all of the sequence on this rank. Multi-head
// attention runs the core's (and bf16 operand) kernels; grouped-query
// attention runs LlamaOps' f32 kernels on the operands' values (bf16 runs:
// bf16 values, the products in f32), rounding the results where asked.
class LocalAttention final : public AttentionOp {
 public:
  explicit LocalAttention(ComputeBackend& backend)
      : backend_(backend), bf16_ops_(backend), llama_(backend.llama_ops()) {}
  void forward(float* out, float* lse, MatrixIn qkv, const AttentionShape& s, bool bf16) override {
    if (s.grouped()) return grouped_forward(out, lse, qkv, s);
    bf16_ops_->attention_forward(out, lse, qkv, s.batch, s.seq_len, s.width, s.heads, bf16);
  }
  void backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out, const float* lse,
                const AttentionShape& s, bool bf16) override {
    if (s.grouped()) return grouped_backward(dqkv, dout, qkv, out, lse, s);
    bf16_ops_->attention_backward(dqkv, dout, qkv, out, lse, s.batch, s.seq_len, s.width, s.heads,
                                  bf16);
  }
  void forward_rounded(float* out, std::uint16_t* bits, float* lse, MatrixIn qkv,
                       const AttentionShape& s) override {
    if (!s.grouped())
      return bf16_ops_->attention_forward_rounded(out, bits, lse, qkv, s.batch, s.seq_len,
                                                  s.width, s.heads);
    grouped_forward(out, lse, qkv, s);
    bf16_ops_->round_to_bf16(out, bits, out, std::size_t(s.batch) * s.seq_len * s.width);
  }
  void backward_rounded(float* dqkv, std::uint16_t* bits, MatrixIn dout, MatrixIn qkv,
                        const float* out, const float* lse, const AttentionShape& s) override {
    if (!s.grouped())
      return bf16_ops_->attention_backward_rounded(dqkv, bits, dout, qkv, out, lse, s.batch,
                                                   s.seq_len, s.width, s.heads);
    // Written, not added to: zero first.
    backend_.zero(dqkv, s.qkv_elements() * sizeof(float));
    grouped_backward(dqkv, dout, qkv, out, lse, s);
    bf16_ops_->round_to_bf16(dqkv, bits, dqkv, s.qkv_elements());
  }

 private:
  void grouped_forward(float* out, float* lse, MatrixIn qkv, const AttentionShape& s) {
    llama_.gqa_attention_forward(out, lse, qkv.values, s.batch, s.seq_len, s.heads, s.kv_heads,
                                 s.head_size());
  }
  void grouped_backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out,
                        const float* lse, const AttentionShape& s) {
    llama_.gqa_attention_backward(dqkv, dout.values, qkv.values, out, lse, s.batch, s.seq_len,
                                  s.heads, s.kv_heads, s.head_size());
  }

  ComputeBackend& backend_;
  Bf16OperandsFor bf16_ops_;  // the backend's 16-bit operand ops, or rounded f32 ones
  LlamaOps& llama_;
};

}  // namespace trident
