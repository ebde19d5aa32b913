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
// attention scores and mixing, 12 * layers * d_model * seq_len (PaLM appendix B).
double gpt_flops_per_token(const GptConfig& c);

}  // namespace trident
