// Shape of the decoder: GPT-2's by default, or any of the choices the Llama
// family made (rotary positions, RMSNorm, a SwiGLU MLP of its own width,
// grouped-query attention, no biases, untied input and output embeddings).
#pragma once
#include <cstddef>

namespace trident {

// model.family: the defaults of the choices below (each key may still be set).
enum class ModelFamily { gpt2, llama };
// model.positions: a learned position table (GPT-2) or rotary embeddings of
// queries and keys (RoFormer, Su et al. 2021; Llama).
enum class PositionEncoding { learned, rope };
// model.norm: LayerNorm with weight and bias, or RMSNorm with a weight only
// (Zhang & Sennrich 2019).
enum class NormKind { layernorm, rmsnorm };
// model.mlp: gelu(x W1) W2, or (silu(x Wg) * (x Wu)) W2 (Shazeer 2020).
enum class MlpKind { gelu, swiglu };

struct GptConfig {
  int layers = 2;
  int d_model = 64;
  int heads = 4;
  int seq_len = 64;
  int vocab = 256;
  // Grouped-query attention: key/value heads, each shared by heads / kv_heads
  // query heads (1: multi-query; 0 or heads: multi-head).
  int kv_heads = 0;
  PositionEncoding positions = PositionEncoding::learned;
  double rope_theta = 10000.0;
  NormKind norm = NormKind::layernorm;
  double norm_eps = 1e-5;
  MlpKind mlp = MlpKind::gelu;
  int ffn_hidden = 0;   // the MLP's hidden width (0: 4 * d_model)
  bool bias = true;     // biases of the linear layers (and LayerNorm's)
  bool tied_embeddings = true;  // the head reads the token embedding's table

  int d_ff() const { return ffn_hidden > 0 ? ffn_hidden : 4 * d_model; }
  int head_size() const { return d_model / heads; }
  int kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  int kv_width() const { return kv_head_count() * head_size(); }
  int qkv_width() const { return d_model + 2 * kv_width(); }  // q, k, v side by side
  // GPT-2's architecture exactly (what every kernel and table before the
  // Llama family's choices assumed).
  bool is_gpt2() const {
    return kv_head_count() == heads && positions == PositionEncoding::learned &&
           norm == NormKind::layernorm && mlp == MlpKind::gelu && ffn_hidden <= 0 && bias &&
           tied_embeddings;
  }
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
