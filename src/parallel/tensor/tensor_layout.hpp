// Tensor parallelism, the math (Megatron-LM, Shoeybi et al. 2019, section 3):
// which slice of each weight a tensor rank holds and the local sizes its
// kernels run on. Communication lives in tensor_comm.
//  - column-parallel (output features split): attn.qkv (by query heads and,
//    grouped-query, by key/value heads), mlp.fc (SwiGLU: gate and up alike);
//  - row-parallel (input features split): attn.proj, mlp.proj;
//  - vocab-parallel: the tied embedding / LM head, vocab padded to 64*tp;
//  - replicated: norms, position embedding, row-parallel biases.
// With sequence parallelism (Korthikanti et al. 2022) the norm/residual
// regions hold 1/tp of the tokens; we split the flattened (batch*seq) token
// axis, which per-token ops do not mind and which all-gathers without
// transposes.
#pragma once
#include <cstdint>

#include "model/gpt_config.hpp"

namespace trident {

struct TensorParallelLayout {
  int size = 1;
  int rank = 0;
  bool sequence_parallel = false;  // only meaningful when size > 1

  bool sp() const { return sequence_parallel && size > 1; }
  // Vocabulary padded so every shard is a whole multiple of 64 rows.
  static int padded_vocab(int vocab, int tp) {
    const int m = 64 * tp;
    return (vocab + m - 1) / m * m;
  }
  int local_vocab(const GptConfig& c) const { return padded_vocab(c.vocab, size) / size; }
  int vocab_begin(const GptConfig& c) const { return rank * local_vocab(c); }
  // Real (unpadded) vocabulary columns in this rank's shard.
  int valid_vocab(const GptConfig& c) const;
  int local_heads(const GptConfig& c) const { return c.heads / size; }
  int local_width(const GptConfig& c) const { return c.d_model / size; }  // attention width
  // Grouped-query attention: this rank's key/value heads (kv_heads divisible by size).
  int local_kv_heads(const GptConfig& c) const { return c.kv_head_count() / size; }
  // The qkv layer's output on this rank: its q heads, then its k and v heads.
  int local_qkv_width(const GptConfig& c) const {
    return (local_heads(c) + 2 * local_kv_heads(c)) * c.head_size();
  }
  int local_ff(const GptConfig& c) const { return c.d_ff() / size; }
  // The MLP's first layer's output on this rank: SwiGLU's [gate | up] halves, or GELU's input.
  int local_fc_width(const GptConfig& c) const {
    return (c.mlp == MlpKind::swiglu ? 2 : 1) * local_ff(c);
  }
  // Tokens whose norm/residual activations this rank holds (all without SP).
  int local_tokens(int tokens) const { return sp() ? tokens / size : tokens; }
  int first_local_token(int tokens) const { return sp() ? rank * (tokens / size) : 0; }
};

}  // namespace trident
