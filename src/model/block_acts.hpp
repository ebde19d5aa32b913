// Where one block's activations of one micro-batch are, as pointers
// (GptModel::block: in the micro-batch's saved activations, or the model's
// working buffer).
#pragma once
#include <cstdint>

namespace trident {

struct BlockActs {
  float *ln1, *ln1_mean, *ln1_rstd, *ln1_full, *qkv, *atty, *lse, *res2, *ln2, *ln2_mean,
      *ln2_rstd, *ln2_full, *fch, *fch_gelu, *res3;
  // Saved 16-bit copies of GEMM and attention inputs that forward's
  // rounding writes itself and backward reads as bf16 bits (null where not:
  // f32 or f16 runs, recompute, SP's gathered norms, a backend without bf16
  // operands). Backward unpacks none of them but atty, whose values
  // attention reads.
  std::uint16_t *ln1_16, *qkv_16, *atty_16, *ln2_16, *fch_gelu_16;
  std::uint16_t* fch_16;  // written by forward's GELU; unpacked for backward's
};

}  // namespace trident
