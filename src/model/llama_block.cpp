// The Llama family's operands of the block and head (Touvron et al. 2023):
// rotary positions on q and k after the qkv GEMM, grouped-query attention,
// SwiGLU, and the untied head; their math is BlockMath's (block_math.hpp,
// LlamaOps' f32 ops). A 16-bit run rounds what the next GEMM reads, as
// GPT-2's path does, but through values (RoPE and the grouped kernels read and
// write values, so no activation of these ops is kept as bits alone).
#include "model/gpt.hpp"

namespace trident {

MatrixIn GptModel::llama_qkv_operand(const Block& a, MatrixIn ln1, const BlockHandles& h) {
  const int QKVl = tp_.local_qkv_width(cfg_);
  bf16_ops_->matmul_forward(a.qkv, ln1, weight(h.qkv_w), param(h.qkv_b), all_tokens_,
                            cfg_.d_model, QKVl);
  math_.rotate(a.qkv, false);
  // Rounded after the rotation: attention and its backward read these values.
  round(a.qkv, std::size_t(all_tokens_) * QKVl);
  return bf16_valued(a.qkv);
}

MatrixIn GptModel::llama_attention_grad_operand(const Block& a, MatrixIn d_att, float* d_3c) {
  const std::size_t n = std::size_t(all_tokens_) * tp_.local_qkv_width(cfg_);
  backend_.zero(d_3c, n * sizeof(float));
  attention_->backward(d_3c, d_att, bf16_valued(a.qkv), a.atty, a.lse, math_.attention_shape(),
                       policy_.store == DType::bf16);
  math_.rotate(d_3c, true);  // the gradient of the values before the rotation
  return gemm_operand(d_3c, n);
}

MatrixIn GptModel::swiglu_hidden(const Block& a, MatrixIn ln2, const BlockHandles& h,
                                 bool recompute) {
  const int Fl = tp_.local_ff(cfg_);
  const std::size_t n = std::size_t(all_tokens_) * Fl;
  bf16_ops_->matmul_forward(a.fch, ln2, weight(h.fc_w), param(h.fc_b), all_tokens_,
                            cfg_.d_model, 2 * Fl);
  round(a.fch, 2 * n);  // as stored: backward reads these values
  math_.swiglu_forward(a.fch_gelu, a.fch);
  if (recompute) {  // backward's weight GEMM reads the values only
    round(a.fch_gelu, n);
    return a.fch_gelu;
  }
  return gemm_operand(a.fch_gelu, n, a.fch_gelu_16);
}

MatrixIn GptModel::swiglu_grad_operand(float* d_fc, float* d_hidden, const float* fch) {
  const int Fl = tp_.local_ff(cfg_);
  const std::size_t n = std::size_t(all_tokens_) * Fl;
  round(d_hidden, n);  // as GELU's backward rounds its incoming gradient
  math_.swiglu_backward(d_fc, d_hidden, fch);
  return gemm_operand(d_fc, 2 * n);
}

void GptModel::untied_logits_backward(const MicroBatchActs& acts, float* d_lnf,
                                      const float* lnf_all, bool weight_grads) {
  const TensorInfo* w = ends_.lm_head;
  if (weight_grads) storage_->need_grads(w->unit);
  bf16_ops_->matmul_backward(d_lnf, weight_grads ? grad(w) : nullptr, nullptr,
                             bf16_valued(act(acts, ends_.logits)), bf16_valued(lnf_all),
                             d_lnf ? weight(w) : MatrixIn(nullptr), all_tokens_, cfg_.d_model,
                             tp_.local_vocab(cfg_), InputGrad::add);
}

}  // namespace trident
