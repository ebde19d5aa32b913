// GPT backward on one tensor rank and pipeline stage: the conjugates of
// forward's collectives (sum of input gradients into each parallel region;
// with SP, all-gather of the gradient leaving it, reduce-scatter of the one
// entering it). Split for the zero-bubble schedules (Qi et al. 2024, section
// 2): B computes the activation gradients the previous stage waits for and
// keeps the output gradient of each weight op for W (the micro-batch's
// weight_inputs, or dead room of its saved activations); W computes the
// weight gradients from those and the saved inputs (a tied head's table's in
// B where GptModelOptions::table_grads_in_b asks). backward() runs both in
// one pass, each weight op where its output gradient is made.
#include "model/gpt.hpp"

#include <stdexcept>

namespace trident {

void GptModel::keep_for_weights(const MicroBatchActs& acts, bool split,
                                const WeightInputPlace& at, const float* src, std::size_t n) {
  if (split) backend_.copy(weight_input(acts, at), src, n * sizeof(float));
}

void GptModel::head_backward(const MicroBatchActs& acts, float* d_res, bool split,
                             bool finalize) {
  const bool weights_now = !split;
  const int C = cfg_.d_model, BT = all_tokens_, BTl = local_tokens_;
  ComputeBackend& be = backend_;
  ModelStorage& st = *storage_;
  const EndHandles& e = ends_;
  float* d_c = scratch(scratch_handles_.d_c);
  const float* lnf_all = tp_.sp() ? act(acts, e.lnf_full) : act(acts, e.lnf);
  be.zero(d_c, std::size_t(BT) * C * sizeof(float));
  // A whole table's gradients, on the first stage, collect here and at the very end.
  // The table's slot is taken before the norm's: the norm must not take the one slot
  // that fits the table.
  if (tied()) logits_backward(acts, d_c, lnf_all, weights_now || table_grads_in_b_, finalize);
  else untied_logits_backward(acts, d_c, lnf_all, weights_now);
  st.need_grads(e.lnf_w->unit);  // the norm's weight gradients come with B (see norm_grads_done)
  round(d_c, std::size_t(BT) * C);
  be.zero(d_res, std::size_t(BTl) * C * sizeof(float));
  const float* d_lnf = reduce_row_parallel(d_c);
  math_.norm_backward(d_res, grad(e.lnf_w), grad(e.lnf_b), d_lnf, output(acts), param(e.lnf_w),
                      e.lnf_mean ? act(acts, e.lnf_mean) : nullptr, act(acts, e.lnf_rstd));
  st.done_params(e.lnf_w->unit);
  if (!tied()) st.done_params(e.lm_head->unit);
  else if (!table_cut()) st.done_params(e.wte->unit);  // the embedding's backward needs only gradients
  if (weights_now) return finish_head_grads(finalize);
  norm_grads_done(e.lnf_w->unit, e.lnf_norms);
  if (table_grads_in_b_ && !table_cut()) st.done_grads(e.wte->unit, false);
}

void GptModel::norm_grads_done(int u, const std::vector<const TensorInfo*>& norms) {
  // B adds a norm's weight gradients (a sum over tokens, C floats) where the
  // fused backward does, in the same order, so W keeps neither the norm's
  // output gradient nor its input. Where gradients leave with every backward
  // they leave here, summed over the tensor group first, and W's are the rest.
  ModelStorage& st = *storage_;
  if (st.grads_leave_each_backward()) sum_partial_grads(norms);
  st.done_grads(u, false);
}

void GptModel::finish_head_grads(bool finalize, bool table) {
  ModelStorage& st = *storage_;
  if (finalize || st.grads_leave_each_backward()) sum_partial_grads(ends_.lnf_norms);
  st.done_grads(ends_.lnf_w->unit, finalize);
  // The head's copy is done (a cut table's units left in logits_backward).
  if (!tied()) st.done_grads(ends_.lm_head->unit, finalize);
  else if (table && !stage_.embedding && !table_cut()) st.done_grads(ends_.wte->unit, finalize);
}

void GptModel::block_backward(const MicroBatchActs& acts, int l, bool split,
                              bool finalize) {
  const bool weights_now = !split;
  const int C = cfg_.d_model, BT = all_tokens_;
  const int Cl = tp_.local_width(cfg_), Fl = tp_.local_ff(cfg_);
  const int QKVl = tp_.local_qkv_width(cfg_), FCl = tp_.local_fc_width(cfg_);
  ModelStorage& st = *storage_;
  const ScratchHandles& s = scratch_handles_;
  float *d_res = scratch(s.d_res), *d_c = scratch(s.d_c), *d_3c = scratch(s.d_3c);
  float* full = scratch(s.full_c);
  float *d_ff_a = scratch(s.d_ff_a), *d_ff_b = scratch(s.d_ff_b);
  const BlockHandles& h = layer(l);
  auto gw = [&](const TensorInfo* t) { return weights_now ? grad(t) : nullptr; };
  auto keep = [&](const WeightInputPlace& at, const float* src, std::size_t count) {
    keep_for_weights(acts, split, at, src, count);
  };
  const Block a = block(acts, l);
  const int u = h.unit;
  st.need_params(u, Pass::backward);
  const float* x_in = block_input(acts, l);
  restore_block(acts, l, a, x_in);  // unpack 16-bit copies, recompute what was not saved
  st.need_grads(u);  // the norms' weight gradients come with B
  // d_res holds dLoss/d(res3) for this rank's tokens.
  MatrixIn d_out = projection_grad(d_res, full);
  keep(h.d_proj, d_out.values, std::size_t(BT) * C);
  bf16_ops_->matmul_backward(d_ff_a, gw(h.mlp_proj_w), gw(h.mlp_proj_b), d_out,
                     saved_input(a.fch_gelu, a.fch_gelu_16), weight(h.mlp_proj_w), BT, Fl, C,
                     InputGrad::write);
  const MatrixIn d_fc =
      cfg_.mlp == MlpKind::swiglu
          ? swiglu_grad_operand(d_ff_b, d_ff_a, a.fch)
          : gelu_grad_operand(d_ff_b, a.fch, packs_bits() ? a.fch_16 : nullptr, d_ff_a,
                              std::size_t(BT) * Fl);
  keep(h.d_fc, d_ff_b, std::size_t(BT) * FCl);
  bf16_ops_->matmul_backward(d_c, gw(h.fc_w), gw(h.fc_b), d_fc, saved_input(a.ln2_full, a.ln2_16),
                     weight(h.fc_w), BT, C, FCl, InputGrad::write);
  round(d_c, std::size_t(BT) * C);
  const float* d_ln2 = reduce_row_parallel(d_c);
  math_.norm_backward(d_res, grad(h.ln2_w), grad(h.ln2_b), d_ln2, a.res2, param(h.ln2_w),
                      a.ln2_mean, a.ln2_rstd);
  // d_res now holds dLoss/d(res2).
  d_out = projection_grad(d_res, full);
  keep(h.d_attn, d_out.values, std::size_t(BT) * C);
  bf16_ops_->matmul_backward(d_c, gw(h.attn_proj_w), gw(h.attn_proj_b), d_out,
                     saved_input(a.atty, a.atty_16), weight(h.attn_proj_w), BT, Cl, C,
                     InputGrad::write);
  const MatrixIn d_qkv = attention_grad_operand(a, gemm_operand(d_c, std::size_t(BT) * Cl), d_3c);
  keep(h.d_qkv, d_3c, std::size_t(BT) * QKVl);
  bf16_ops_->matmul_backward(d_c, gw(h.qkv_w), gw(h.qkv_b), d_qkv, saved_input(a.ln1_full, a.ln1_16),
                     weight(h.qkv_w), BT, C, QKVl, InputGrad::write);
  round(d_c, std::size_t(BT) * C);
  const float* d_ln1 = reduce_row_parallel(d_c);
  math_.norm_backward(d_res, grad(h.ln1_w), grad(h.ln1_b), d_ln1, x_in, param(h.ln1_w),
                      a.ln1_mean, a.ln1_rstd);
  st.done_params(u);
  if (weights_now) finish_block_grads(l, finalize);
  else norm_grads_done(u, h.norms);
}

void GptModel::finish_block_grads(int l, bool finalize) {
  ModelStorage& st = *storage_;
  const BlockHandles& h = layer(l);
  if (finalize || st.grads_leave_each_backward()) sum_partial_grads(h.norms);
  st.done_grads(h.unit, finalize);
}

void GptModel::position_grads(float* dwpe, const float* d_enc) {
  const int C = cfg_.d_model;
  if (tokens_.whole_sequences()) {
    backend_.position_backward(dwpe, d_enc, local_tokens_, cfg_.seq_len, first_token_, C);
    return;
  }
  for (const PositionRun& r : tokens_.runs_of_rows(first_token_, local_tokens_))
    backend_.position_backward(dwpe, d_enc + std::size_t(r.row) * C, r.count, cfg_.seq_len,
                               r.position, C);
}

void GptModel::embedding_grads(const MicroBatchActs& acts, const float* d_emb, bool finalize) {
  ModelStorage& st = *storage_;
  const TensorInfo* wpe = ends_.wpe;  // null with rotary positions
  if (wpe) {
    st.need_grads(wpe->unit);
    position_grads(grad(wpe), d_emb);
    if ((finalize || st.grads_leave_each_backward()) && tp_.sp())
      group_->all_reduce(grad(wpe), wpe->numel);
  }
  table_grads_from_tokens(acts, gather(d_emb, scratch(scratch_handles_.full_c)), finalize);
  if (wpe) st.done_grads(wpe->unit, finalize);
}

void GptModel::backward_pass(const MicroBatchActs& acts, bool split, float* input_grad,
                             const GradsReadyFn& ready, bool finalize) {
  const bool weights_now = !split;
  auto notify = [&](const TensorInfo* first) {
    if (weights_now && ready && finalize) ready(first->offset);
  };
  // d_res: dLoss/d(output) of this stage, from the head or from the next stage.
  float* d_res = scratch(scratch_handles_.d_res);
  if (stage_.head) {
    head_backward(acts, d_res, split, finalize);
    notify(ends_.lnf_w);
  }
  for (int l = last_block() - 1; l >= stage_.first_block; --l) {
    block_backward(acts, l, split, finalize);
    notify(layer(l).ln1_w);
  }
  const std::size_t n = std::size_t(local_tokens_) * cfg_.d_model;
  if (!stage_.embedding) {  // d_res = dLoss/d(input): kept for the previous stage
    if (!input_grad)
      throw std::logic_error("backward of a model without the embeddings needs an input_grad");
    backend_.copy(input_grad, d_res, n * sizeof(float));
    return;
  }
  keep_for_weights(acts, split, ends_.d_embed, d_res, n);
  if (!weights_now) return;
  embedding_grads(acts, d_res, finalize);
  notify(ends_.wte);
}

void GptModel::backward(const MicroBatchActs& acts, const GradsReadyFn& ready, bool finalize,
                        float* input_grad) {
  backward_pass(acts, /*split=*/false, input_grad, ready, finalize);
}

void GptModel::backward_input(const MicroBatchActs& acts, float* input_grad) {
  if (!acts.weight_inputs && weight_layout_.buffer.size() > 0)
    throw std::logic_error("backward_input needs the micro-batch's weight_inputs");
  backward_pass(acts, /*split=*/true, input_grad, nullptr, false);
}

void GptModel::backward_weights(const MicroBatchActs& acts, const GradsReadyFn& ready,
                                bool finalize) {
  const int C = cfg_.d_model, BT = all_tokens_;
  const int Cl = tp_.local_width(cfg_), Fl = tp_.local_ff(cfg_);
  const int QKVl = tp_.local_qkv_width(cfg_), FCl = tp_.local_fc_width(cfg_);
  ModelStorage& st = *storage_;
  auto notify = [&](const TensorInfo* first) {
    if (ready && finalize) ready(first->offset);
  };
  if (stage_.head) {
    const float* lnf_all = tp_.sp() ? act(acts, ends_.lnf_full) : act(acts, ends_.lnf);
    if (!tied()) untied_logits_backward(acts, nullptr, lnf_all, true);
    else if (!table_grads_in_b_) logits_backward(acts, nullptr, lnf_all, true, finalize);  // the table's slot first
    st.need_grads(ends_.lnf_w->unit);  // the norm's gradients came with B
    finish_head_grads(finalize, !table_grads_in_b_);
    notify(ends_.lnf_w);
  }
  for (int l = last_block() - 1; l >= stage_.first_block; --l) {
    const BlockHandles& h = layer(l);
    // B kept the output gradients as the GEMMs read them: bf16 values in a bf16 run.
    auto d = [&](const WeightInputPlace& at) { return bf16_valued(weight_input(acts, at)); };
    const Block a = block(acts, l);
    const int u = h.unit;
    // The weight ops read the block's saved inputs: what lives in the
    // working buffer is unpacked (16-bit) or recomputed again.
    if (policy_.recompute == Recompute::full) {
      st.need_params(u, Pass::backward);
      restore_block(acts, l, a, block_input(acts, l));
      st.done_params(u);
    } else {
      unpack_block(acts, l);
      regather_norms(a);
    }
    st.need_grads(u);
    bf16_ops_->matmul_backward(nullptr, grad(h.mlp_proj_w), grad(h.mlp_proj_b), d(h.d_proj),
                       saved_input(a.fch_gelu, a.fch_gelu_16), nullptr, BT, Fl, C,
                       InputGrad::add);
    bf16_ops_->matmul_backward(nullptr, grad(h.fc_w), grad(h.fc_b), d(h.d_fc),
                       saved_input(a.ln2_full, a.ln2_16), nullptr, BT, C, FCl, InputGrad::add);
    bf16_ops_->matmul_backward(nullptr, grad(h.attn_proj_w), grad(h.attn_proj_b), d(h.d_attn),
                       saved_input(a.atty, a.atty_16), nullptr, BT, Cl, C, InputGrad::add);
    bf16_ops_->matmul_backward(nullptr, grad(h.qkv_w), grad(h.qkv_b), d(h.d_qkv),
                       saved_input(a.ln1_full, a.ln1_16), nullptr, BT, C, QKVl,
                       InputGrad::add);
    finish_block_grads(l, finalize);
    notify(h.ln1_w);
  }
  if (!stage_.embedding) return;
  embedding_grads(acts, weight_input(acts, ends_.d_embed), finalize);
  notify(ends_.wte);
}

}  // namespace trident
