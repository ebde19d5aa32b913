// What the model resolves by name once, when it is built (gpt_handles.cpp):
// each block's parameters and activation homes, the embeddings' and head's,
// and the scratch buffers. A step then reaches everything through these, and
// looks nothing up by name (tests/unit/test_model_handles.cpp counts).
#pragma once
#include <cstddef>
#include <vector>

#include "memory/tensor_table.hpp"

namespace trident {

// Where B keeps one input of W for a micro-batch (GptModel::weight_input_layout).
struct WeightInputPlace {
  bool in_saved = false;
  std::size_t offset = 0;  // elements into the saved f32 activations, or into weight_inputs
};

// Where one activation of a micro-batch lives: its saved activations, or the working buffer.
struct ActHome {
  bool in_saved = false;
  std::size_t offset = 0;  // elements into the saved f32 activations, or the working buffer
};

// A saved 16-bit copy and the working-buffer tensor it is converted from or to.
struct PackedCopy {
  std::size_t bits = 0;  // elements into the saved 16-bit copies
  std::size_t work = 0;  // elements into the working buffer
  std::size_t numel = 0;
};

struct BlockHandles {
  static constexpr std::size_t none = std::size_t(-1);
  // Parameters, in the parameter table.
  const TensorInfo *ln1_w = nullptr, *ln1_b = nullptr, *qkv_w = nullptr, *qkv_b = nullptr,
                   *attn_proj_w = nullptr, *attn_proj_b = nullptr, *ln2_w = nullptr,
                   *ln2_b = nullptr, *fc_w = nullptr, *fc_b = nullptr, *mlp_proj_w = nullptr,
                   *mlp_proj_b = nullptr;
  int unit = 0;                          // the block's partition unit
  std::vector<const TensorInfo*> norms;  // ln1 and ln2's w and b: SP sums their gradients
  // Activations (BlockActs); the gathered norm outputs only with SP.
  ActHome ln1, ln1_mean, ln1_rstd, ln1_full, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd,
      ln2_full, fch, fch_gelu, res3;
  // 16-bit copies read and written as bits (offsets into the saved 16-bit copies), or none.
  std::size_t ln1_16 = none, qkv_16 = none, atty_16 = none, ln2_16 = none, fch_gelu_16 = none,
              fch_16 = none;
  const TensorInfo* res3_part = nullptr;  // the output's partition, in the saved table
  // In table order: the copies save_block converts from the working buffer
  // (not written by forward's rounding), and those unpack_block converts back
  // (not read as bits alone).
  std::vector<PackedCopy> saved_copies, unpacked_copies;
  // Zero-bubble schedules: where B keeps the output gradients of the linears.
  WeightInputPlace d_proj, d_fc, d_attn, d_qkv;
};

// The embeddings' and head's tensors, null where the stage has none of them.
struct EndHandles {
  const TensorInfo *wte = nullptr, *wpe = nullptr, *lnf_w = nullptr, *lnf_b = nullptr;
  const TensorInfo* lm_head = nullptr;  // the untied head's table (null: tied)
  std::vector<const TensorInfo*> lnf_norms;  // lnf's w and b: SP sums their gradients
  // Saved activations, in the saved table.
  const TensorInfo *encoded = nullptr, *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr,
                   *lnf_full = nullptr, *logits = nullptr, *losses = nullptr,
                   *xent_max = nullptr, *xent_packed = nullptr;
  WeightInputPlace d_embed;
};

// The shared scratch buffers, in the scratch table (null where not built).
struct ScratchHandles {
  const TensorInfo *full_c = nullptr, *d_res = nullptr, *d_c = nullptr, *d_3c = nullptr,
                   *d_ff_a = nullptr, *d_ff_b = nullptr, *local_c = nullptr, *sp_pack = nullptr,
                   *gemm_bits = nullptr;
};

}  // namespace trident
