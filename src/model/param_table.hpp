// The GPT parameter table: every weight's offset, shape and shard in the
// parameter arena, for one tensor rank and one pipeline stage.
#pragma once
#include <cstddef>

#include "memory/tensor_table.hpp"
#include "model/gpt_config.hpp"
#include "model/stage_spec.hpp"
#include "parallel/tensor/tensor_layout.hpp"

namespace trident {

// How the parameter arena is cut into partition units (ZeRO's granule).
struct UnitLayout {
  UnitLayout(std::size_t align = 1) : align(align) {}
  std::size_t align = 1;  // each unit padded to a multiple of this (ZeRO: dp x kAlign)
  // ZeRO-3: the token embedding's rows cut into table_units units of dp pieces
  // each, so no gathered unit (nor any micro-batch's saved activations) holds
  // the whole table; 1: one unit.
  int table_units = 1, dp = 1;
};

// The GPT parameter table for one tensor rank (size 1: the serial model).
// Arena order: wte, wpe, block 0 .. block L-1, final norm, and the untied
// head's lm_head.w (vocab-parallel like wte). The Llama family's choices drop
// tensors (wpe with rotary positions, the norms' .b with RMSNorm, the
// linears' .b without biases) and reshape two (param_table.cpp: attn.qkv.w
// with grouped-query attention, mlp.fc.w with SwiGLU). Backward finishes
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
