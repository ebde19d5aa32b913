// The Llama family's parts of the block and head (Touvron et al. 2023):
// RMSNorm, rotary positions on q and k after the qkv GEMM, grouped-query
// attention, SwiGLU, and the untied head. Each runs LlamaOps' f32 ops; a
// 16-bit run rounds what the next GEMM reads, as GPT-2's path does, but
// through values (RoPE and the grouped kernels read and write values, so no
// activation of these ops is kept as bits alone).
#include "model/gpt.hpp"

namespace trident {

void GptModel::norm_forward(float* out, float* mean, float* rstd, const float* x,
                            const TensorInfo* w, const TensorInfo* b) {
  const int N = local_tokens_, C = cfg_.d_model;
  if (cfg_.norm == NormKind::layernorm)
    return backend_.layernorm_forward(out, mean, rstd, x, param(w), param(b), N, C);
  llama_.rmsnorm_forward(out, rstd, x, param(w), N, C, float(cfg_.norm_eps));
}

void GptModel::norm_backward(float* dx, const TensorInfo* w, const TensorInfo* b,
                             const float* dout, const float* x, const float* mean,
                             const float* rstd) {
  const int N = local_tokens_, C = cfg_.d_model;
  if (cfg_.norm == NormKind::layernorm)
    return backend_.layernorm_backward(dx, grad(w), grad(b), dout, x, param(w), mean, rstd, N, C);
  llama_.rmsnorm_backward(dx, grad(w), dout, x, param(w), rstd, N, C);
}

AttentionShape GptModel::attention_shape() const {
  return {B_, tokens_.rows_per_sequence(), tp_.local_width(cfg_), tp_.local_heads(cfg_),
          tp_.local_kv_heads(cfg_)};
}

void GptModel::rotate(float* qkv, bool backward) {
  if (cfg_.positions != PositionEncoding::rope) return;
  // q and k are adjacent in each row: one pass over NH + KVH heads. Every
  // tensor rank rotates all rows of its heads, each run of rows by its own
  // positions (a context-parallel rank's chunks are not contiguous).
  const int heads = tp_.local_heads(cfg_) + tp_.local_kv_heads(cfg_), hs = cfg_.head_size();
  const std::size_t ld = std::size_t(tp_.local_qkv_width(cfg_));
  auto apply = [&](float* x, int batch, int rows, int pos0) {
    if (backward) llama_.rope_backward(x, *rotary_, batch, rows, heads, hs, ld, pos0);
    else llama_.rope_forward(x, *rotary_, batch, rows, heads, hs, ld, pos0);
  };
  if (tokens_.whole_sequences()) return apply(qkv, B_, cfg_.seq_len, 0);
  const int per_sequence = tokens_.rows_per_sequence();
  for (int b = 0; b < B_; ++b)
    for (const PositionRun& r : tokens_.sequence_runs())
      apply(qkv + (std::size_t(b) * per_sequence + r.row) * ld, 1, r.count, r.position);
}

MatrixIn GptModel::llama_qkv_operand(const Block& a, MatrixIn ln1, const BlockHandles& h) {
  const int QKVl = tp_.local_qkv_width(cfg_);
  bf16_ops_->matmul_forward(a.qkv, ln1, weight(h.qkv_w), param(h.qkv_b), all_tokens_,
                            cfg_.d_model, QKVl);
  rotate(a.qkv, false);
  // Rounded after the rotation: attention and its backward read these values.
  round(a.qkv, std::size_t(all_tokens_) * QKVl);
  return bf16_valued(a.qkv);
}

MatrixIn GptModel::llama_attention_grad_operand(const Block& a, MatrixIn d_att, float* d_3c) {
  const std::size_t n = std::size_t(all_tokens_) * tp_.local_qkv_width(cfg_);
  backend_.zero(d_3c, n * sizeof(float));
  attention_->backward(d_3c, d_att, bf16_valued(a.qkv), a.atty, a.lse, attention_shape(),
                       policy_.store == DType::bf16);
  rotate(d_3c, true);  // the gradient of the values before the rotation
  return gemm_operand(d_3c, n);
}

MatrixIn GptModel::swiglu_hidden(const Block& a, MatrixIn ln2, const BlockHandles& h,
                                 bool recompute) {
  const int Fl = tp_.local_ff(cfg_);
  const std::size_t n = std::size_t(all_tokens_) * Fl;
  bf16_ops_->matmul_forward(a.fch, ln2, weight(h.fc_w), param(h.fc_b), all_tokens_,
                            cfg_.d_model, 2 * Fl);
  round(a.fch, 2 * n);  // as stored: backward reads these values
  llama_.swiglu_forward(a.fch_gelu, a.fch, all_tokens_, Fl);
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
  backend_.zero(d_fc, 2 * n * sizeof(float));
  llama_.swiglu_backward(d_fc, d_hidden, fch, all_tokens_, Fl);
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
