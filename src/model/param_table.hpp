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
// head's lm_head.w ([vocab, C], vocab-parallel like wte). The Llama family's
// choices drop tensors: wpe with rotary positions, the norms' .b with
// RMSNorm, every linear's .b without biases. Global layouts (C = d_model,
// hs = C / heads, NH = heads, KVH = kv_heads, F = ffn_hidden; weights are
// [out, in] as PyTorch's, y = x W^T):
//  - h.L.attn.qkv.w: rows [q | k | v], q = NH hs rows (head h: rows
//    [h hs, (h + 1) hs)), then k and v of KVH hs rows each; query head h
//    reads key/value head h / (NH / KVH). Multi-head (KVH = NH, GPT-2):
//    global shape [3, C, C], split on dim 1. Grouped: [(NH + 2 KVH) hs, C],
//    split on dim 0 in three segments (TensorInfo::segments). Either way
//    tensor rank r holds query heads [r NH/tp, (r+1) NH/tp) and key/value
//    heads [r KVH/tp, (r+1) KVH/tp), its rows in [q | k | v] order.
//  - h.L.mlp.fc.w with SwiGLU: [2, F, C], the gate's rows (W1 of Shazeer
//    2020; silu applies to it) then the up projection's (W3), split on dim 1:
//    rank r holds [its gate rows | its up rows]. GELU: [F, C], split on dim 0.
//  - h.L.mlp.proj.w: [C, F], split on dim 1 (either MLP). Backward finishes
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
