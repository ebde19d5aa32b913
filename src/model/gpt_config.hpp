// Shape of the GPT-2-style decoder.
#pragma once
#include <cstddef>

namespace trident {

struct GptConfig {
  int layers = 2;
  int d_model = 64;
  int heads = 4;
  int seq_len = 64;
  int vocab = 256;
  int d_ff() const { return 4 * d_model; }
};

// Parameter count of the global (unsharded) model.
std::size_t gpt_num_parameters(const GptConfig& c);
// Training FLOPs per token: 6 per matmul weight (forward + backward) plus the
// attention scores and mixing. A causal model needs the products below the
// diagonal only, 6 * layers * d_model * seq_len (as llm.c counts; Trident's
// attention kernels skip the masked tiles): the basis of the trainer's MFU.
// Megatron and PaLM (appendix B) count attention in full, 12 * layers *
// d_model * seq_len: the basis the planner compares with published runs on.
enum class AttentionFlops { causal, full };
double gpt_flops_per_token(const GptConfig& c, AttentionFlops attention = AttentionFlops::causal);

}  // namespace trident
