#include "model/block_math.hpp"

namespace trident {

BlockMath::BlockMath(const GptConfig& c, const TensorParallelLayout& tp,
                     const TokenLayout& tokens, ComputeBackend& backend)
    : cfg_(c),
      tp_(tp),
      tokens_(tokens),
      backend_(backend),
      llama_(backend.llama_ops()),
      norm_rows_(tp.local_tokens(tokens.rows())) {
  if (c.positions == PositionEncoding::rope)
    rotary_ = llama_.make_rotary_table(c.seq_len, c.head_size(), c.rope_theta);
}

AttentionShape BlockMath::attention_shape() const {
  return {tokens_.batch(), tokens_.rows_per_sequence(), tp_.local_width(cfg_),
          tp_.local_heads(cfg_), tp_.local_kv_heads(cfg_)};
}

void BlockMath::norm_forward(float* out, float* mean, float* rstd, const float* x,
                             const float* w, const float* b) {
  const int N = norm_rows_, C = cfg_.d_model;
  if (cfg_.norm == NormKind::layernorm)
    return backend_.layernorm_forward(out, mean, rstd, x, w, b, N, C);
  llama_.rmsnorm_forward(out, rstd, x, w, N, C, float(cfg_.norm_eps));
}

void BlockMath::norm_backward(float* dx, float* dw, float* db, const float* dout,
                              const float* x, const float* w, const float* mean,
                              const float* rstd) {
  const int N = norm_rows_, C = cfg_.d_model;
  if (cfg_.norm == NormKind::layernorm)
    return backend_.layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
  llama_.rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
}

void BlockMath::rotate(float* qkv, bool backward) {
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
  const int B = tokens_.batch();
  if (tokens_.whole_sequences()) return apply(qkv, B, cfg_.seq_len, 0);
  const int per_sequence = tokens_.rows_per_sequence();
  for (int b = 0; b < B; ++b)
    for (const PositionRun& r : tokens_.sequence_runs())
      apply(qkv + (std::size_t(b) * per_sequence + r.row) * ld, 1, r.count, r.position);
}

void BlockMath::swiglu_forward(float* hidden, const float* fc_out) {
  llama_.swiglu_forward(hidden, fc_out, tokens_.rows(), tp_.local_ff(cfg_));
}

void BlockMath::swiglu_backward(float* d_fc_out, const float* d_hidden, const float* fc_out) {
  const int rows = tokens_.rows(), Fl = tp_.local_ff(cfg_);
  backend_.zero(d_fc_out, 2 * std::size_t(rows) * Fl * sizeof(float));
  llama_.swiglu_backward(d_fc_out, d_hidden, fc_out, rows, Fl);
}

}  // namespace trident
