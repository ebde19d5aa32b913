// Causal self-attention as the model calls it: forward from a block's qkv,
// backward to qkv's gradient. The model is given one (GptModelOptions::
// attention); the default runs the compute backend's kernels on this rank's
// heads and tokens. Another parallelism of the sequence (context parallelism:
// ring attention over a context group) is another implementation.
#pragma once
#include <cstddef>
#include <cstdint>

#include "compute/bf16_operands.hpp"

namespace trident {

// One micro-batch's attention on this rank: batch x seq_len queries, `heads`
// heads spanning `width` features (q, k and v side by side in qkv).
struct AttentionShape {
  int batch = 0, seq_len = 0, width = 0, heads = 0;
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

// The backend's kernels, all of the sequence on this rank.
class LocalAttention final : public AttentionOp {
 public:
  explicit LocalAttention(ComputeBackend& backend) : bf16_ops_(backend) {}
  void forward(float* out, float* lse, MatrixIn qkv, const AttentionShape& s, bool bf16) override {
    bf16_ops_->attention_forward(out, lse, qkv, s.batch, s.seq_len, s.width, s.heads, bf16);
  }
  void backward(float* dqkv, MatrixIn dout, MatrixIn qkv, const float* out, const float* lse,
                const AttentionShape& s, bool bf16) override {
    bf16_ops_->attention_backward(dqkv, dout, qkv, out, lse, s.batch, s.seq_len, s.width, s.heads,
                                  bf16);
  }
  void forward_rounded(float* out, std::uint16_t* bits, float* lse, MatrixIn qkv,
                       const AttentionShape& s) override {
    bf16_ops_->attention_forward_rounded(out, bits, lse, qkv, s.batch, s.seq_len, s.width, s.heads);
  }
  void backward_rounded(float* dqkv, std::uint16_t* bits, MatrixIn dout, MatrixIn qkv,
                        const float* out, const float* lse, const AttentionShape& s) override {
    bf16_ops_->attention_backward_rounded(dqkv, bits, dout, qkv, out, lse, s.batch, s.seq_len,
                                          s.width, s.heads);
  }

 private:
  Bf16OperandsFor bf16_ops_;  // the backend's 16-bit operand ops, or rounded f32 ones
};

}  // namespace trident
