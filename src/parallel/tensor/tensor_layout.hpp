// Tensor parallelism, the math (Megatron-LM, Shoeybi et al. 2019, section 3):
// which slice of each weight a tensor rank holds and the local sizes its
// kernels run on. Communication lives in tensor_comm.
//  - column-parallel (output features split): attn.qkv (by heads), mlp.fc;
//  - row-parallel (input features split): attn.proj, mlp.proj;
//  - vocab-parallel: the tied embedding / LM head, vocab padded to 64*tp;
//  - replicated: norms, position embedding, row-parallel biases.
// With sequence parallelism (Korthikanti et al. 2022) the norm/residual
// regions hold 1/tp of the tokens; we split the flattened (batch*seq) token
// axis, which per-token ops do not mind and which all-gathers without
// transposes.
#pragma once
#include <cstdint>

#include "memory/tensor_table.hpp"
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
  int local_ff(const GptConfig& c) const { return c.d_ff() / size; }
  // Tokens whose norm/residual activations this rank holds (all without SP).
  int local_tokens(int tokens) const { return sp() ? tokens / size : tokens; }
  int first_local_token(int tokens) const { return sp() ? rank * (tokens / size) : 0; }
};

// The part of the model one pipeline stage runs: a range of blocks, plus the
// embeddings on the first stage and the final norm and tied head on the last.
struct StageSpec {
  int first_block = 0;
  int num_blocks = -1;  // -1: all blocks from first_block on
  bool embedding = true;
  bool head = true;
  int blocks(int layers) const { return num_blocks < 0 ? layers - first_block : num_blocks; }
};

// How the parameter arena is cut into partition units (ZeRO's granule).
struct UnitLayout {
  UnitLayout(std::size_t align = 1) : align(align) {}
  std::size_t align = 1;  // each unit padded to a multiple of this (ZeRO: dp x kAlign)
  // ZeRO-3: the token embedding's rows cut into table_units units of dp pieces
  // each, so no gathered unit (and no slot) holds the whole table; 1: one unit.
  int table_units = 1, dp = 1;
};

// The GPT parameter table for one tensor rank (size 1: the serial model).
// Arena order: wte, wpe, block 0 .. block L-1, final norm. Backward finishes
// gradients from the end of this order to its start, so data-parallel buckets
// are contiguous ranges that become ready back to front.
// units.align > 1 pads each unit (embeddings, each block, final norm) to a
// multiple of it, so ZeRO can split every unit evenly over the data group.
TensorTable build_gpt_param_table(const GptConfig& c, const TensorParallelLayout& tp = {},
                                  const UnitLayout& units = {}, const StageSpec& stage = {});

// Units the token embedding needs so that none is larger than a block:
// ceil(table / block) for this tensor rank's shards.
int table_units_for_blocks(const GptConfig& c, const TensorParallelLayout& tp);

}  // namespace trident
