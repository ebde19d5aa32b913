// GPT forward on one tensor rank and pipeline stage (Megatron's f/g
// operators: identity in, sum out of each parallel region; with SP,
// all-gather in, reduce-scatter out).
#include "model/gpt.hpp"

namespace trident {

void GptModel::block_forward(const Block& a, const float* x, int l, bool recompute) {
  const int C = cfg_.d_model, BT = all_tokens_, BTl = local_tokens_;
  const int Cl = tp_.local_width(cfg_), Fl = tp_.local_ff(cfg_);
  ComputeBackend& be = backend_;
  const BlockHandles& h = layer(l);
  float* full = scratch(scratch_handles_.full_c);
  // Row-parallel biases are added once: by tensor rank 0, before the sum.
  const bool bias_here = tp_.rank == 0;
  const MatrixIn ln1 =
      norm_operand(a.ln1, a.ln1_full, a.ln1_16, a.ln1_mean, a.ln1_rstd, x, h.ln1_w, h.ln1_b);
  const MatrixIn qkv = math_.llama_attention()
                           ? llama_qkv_operand(a, ln1, h)
                           : linear_operand(a.qkv, a.qkv_16, ln1, weight(h.qkv_w), param(h.qkv_b),
                                            BT, C, 3 * Cl);
  bf16_ops_->matmul_forward(full, attention_operand(a, qkv), weight(h.attn_proj_w),
                    bias_here ? param(h.attn_proj_b) : nullptr, BT, Cl, C);
  be.add(a.res2, x, reduce_row_parallel(full), std::size_t(BTl) * C);

  const MatrixIn ln2 =
      norm_operand(a.ln2, a.ln2_full, a.ln2_16, a.ln2_mean, a.ln2_rstd, a.res2, h.ln2_w, h.ln2_b);
  const MatrixIn fch_gelu = cfg_.mlp == MlpKind::swiglu
                                ? swiglu_hidden(a, ln2, h, recompute)
                                : mlp_hidden(a, ln2, weight(h.fc_w), param(h.fc_b), recompute);
  if (recompute) return;  // backward needs neither the MLP's output nor res3
  bf16_ops_->matmul_forward(full, fch_gelu, weight(h.mlp_proj_w),
                    bias_here ? param(h.mlp_proj_b) : nullptr, BT, Fl, C);
  // a.res3 may be x's buffer (partitioned recompute): x is dead after res2.
  be.add(a.res3, a.res2, reduce_row_parallel(full), std::size_t(BTl) * C);
}

void GptModel::add_positions(float* enc) {
  const int C = cfg_.d_model;
  if (tokens_.whole_sequences()) {  // one pass: row r is position r mod seq_len
    backend_.position_forward(enc, param(ends_.wpe), local_tokens_, cfg_.seq_len, first_token_, C);
    return;
  }
  for (const PositionRun& r : tokens_.runs_of_rows(first_token_, local_tokens_))
    backend_.position_forward(enc + std::size_t(r.row) * C, param(ends_.wpe), r.count,
                              cfg_.seq_len, r.position, C);
}

double GptModel::forward(const MicroBatchActs& acts, const std::int32_t* tokens, const std::int32_t* targets,
                         float dloss) {
  const int C = cfg_.d_model, BT = all_tokens_, BTl = local_tokens_;
  std::int32_t* tok = acts.tokens;
  std::int32_t* tgt = tok + BT;
  backend_.copy_from_host(tok, tokens, BT * sizeof(std::int32_t));
  backend_.copy_from_host(tgt, targets, BT * sizeof(std::int32_t));
  ComputeBackend& be = backend_;
  ModelStorage& st = *storage_;
  float* full = scratch(scratch_handles_.full_c);
  const EndHandles& e = ends_;

  const float* x = act(acts, e.encoded);
  if (stage_.embedding) {
    // Vocab-parallel embedding: each rank looks up its shard, the group sums.
    float* enc = act(acts, e.encoded);
    if (tp_.sp()) {
      lookup_tokens(full, tok);
      group_->reduce_scatter_tokens(full, enc, std::size_t(BTl) * C);
    } else {
      lookup_tokens(enc, tok);
      group_->all_reduce(enc, std::size_t(BT) * C);
    }
    if (e.wpe) {  // learned positions (rotary ones act on q and k in each block)
      st.need_params(e.wpe->unit, Pass::forward);
      add_positions(enc);
      st.done_params(e.wpe->unit);
    }
  }

  for (int l = stage_.first_block; l < last_block(); ++l) {
    const Block a = block(acts, l);
    st.need_params(layer(l).unit, Pass::forward);
    block_forward(a, x, l, false);
    st.done_params(layer(l).unit);
    save_block(acts, l);
    x = a.res3;
  }
  if (!stage_.head) return 0.0;

  // The head needs the final norm and its table (the token embedding, or the
  // untied lm_head). Both stay until backward has passed the head (or until
  // now, for eval); a cut table is gathered again, unit by unit, in backward.
  const int Vl = tp_.local_vocab(cfg_), vlo = tp_.vocab_begin(cfg_), valid = tp_.valid_vocab(cfg_);
  st.need_params(e.lnf_w->unit, Pass::forward);
  math_.norm_forward(act(acts, e.lnf), e.lnf_mean ? act(acts, e.lnf_mean) : nullptr,
                     act(acts, e.lnf_rstd), x, param(e.lnf_w), param(e.lnf_b));
  round(act(acts, e.lnf), std::size_t(BTl) * C);
  const float* lnf = gather(act(acts, e.lnf), tp_.sp() ? act(acts, e.lnf_full) : nullptr);
  float* logits = act(acts, e.logits);
  if (tied()) {
    logits_forward(logits, lnf);  // vocab shard
  } else {
    st.need_params(e.lm_head->unit, Pass::forward);  // held until the head's backward
    bf16_ops_->matmul_forward(logits, bf16_valued(lnf), weight(e.lm_head), nullptr, BT, C, Vl);
  }
  // Vocab-parallel cross-entropy: no rank ever holds all the logits of a token.
  float *mx = act(acts, e.xent_max), *packed = act(acts, e.xent_packed);
  if (tp_.size == 1) {
    be.xent_stats(mx, packed, logits, tgt, BT, Vl, valid);
  } else {
    be.xent_max(mx, logits, BT, Vl, valid);
    group_->max_over_vocab(mx, BT);
    be.xent_sums(packed, logits, mx, tgt, vlo, BT, Vl, valid);
    group_->sum_over_vocab(packed, 2 * std::size_t(BT));
  }
  // bf16 runs take the logits' gradient in bf16, as autocast does: the
  // classifier's backward GEMMs then run on bf16 kernels.
  if (dloss != 0.0f && policy_.store == DType::bf16)
    bf16_ops_->xent_finish_rounded(act(acts, e.losses), logits, logits, mx, packed, tgt, vlo, BT, Vl,
                           valid, dloss);
  else
    be.xent_finish(act(acts, e.losses), dloss != 0.0f ? logits : nullptr, logits, mx, packed,
                   tgt, vlo, BT, Vl, valid, dloss);
  if (dloss == 0.0f) {
    st.done_params(e.lnf_w->unit);
    if (!tied()) st.done_params(e.lm_head->unit);
    else if (!table_cut()) st.done_params(e.wte->unit);
  }
  be.copy_to_host(host_losses_.data(), act(acts, e.losses), BT * sizeof(float));
  double sum = 0;
  for (float v : host_losses_) sum += v;
  return sum;
}

}  // namespace trident
