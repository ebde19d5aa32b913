// GPT backward on one tensor rank and pipeline stage: the conjugates of
// forward's collectives (sum of input gradients into each parallel region;
// with SP, all-gather of the gradient leaving it, reduce-scatter of the one
// entering it).
#include <fmt/format.h>

#include "model/gpt.hpp"

namespace trident {

void GptModel::head_backward(int slot, float* d_res, bool finalize) {
  const int C = cfg_.d_model, BT = BT_, BTl = BTl_, Vl = tp_.local_vocab(cfg_);
  ComputeBackend& be = backend_;
  ModelStorage& st = *storage_;
  float* d_c = scratch("d_c");
  const float* x_last = output(slot);
  const float* lnf_all = tp_.sp() ? act(slot, "lnf_full") : act(slot, "lnf");
  st.need_grads(unit("wte"));  // on the first stage it collects here and at the very end
  st.need_grads(unit("lnf.w"));
  be.zero(d_c, std::size_t(BT) * C * sizeof(float));
  be.matmul_backward(d_c, G("wte"), nullptr, act(slot, "logits"), lnf_all, P("wte"), BT, C, Vl);
  round(d_c, std::size_t(BT) * C);
  be.zero(d_res, std::size_t(BTl) * C * sizeof(float));
  be.layernorm_backward(d_res, G("lnf.w"), G("lnf.b"), reduce_row_parallel(d_c), x_last,
                        P("lnf.w"), act(slot, "lnf_mean"), act(slot, "lnf_rstd"), BTl, C);
  if (finalize || st.grads_leave_each_backward()) sum_partial_grads({"lnf.w", "lnf.b"});
  st.done_params(unit("lnf.w"));
  st.done_params(unit("wte"));  // the embedding's backward needs only gradients
  st.done_grads(unit("lnf.w"), finalize);
  if (!stage_.embedding) st.done_grads(unit("wte"), finalize);  // the head's copy is done
}

void GptModel::backward(int slot, const GradsReadyFn& ready, bool finalize) {
  const int B = B_, T = cfg_.seq_len, C = cfg_.d_model, BT = BT_, BTl = BTl_;
  const int Cl = tp_.local_width(cfg_), NHl = tp_.local_heads(cfg_), Fl = tp_.local_ff(cfg_);
  const std::int32_t* tok = tokens_of(slot);
  auto notify = [&](const std::string& first) {
    if (ready && finalize) ready(table_.at(first).offset);
  };
  ComputeBackend& be = backend_;
  ModelStorage& st = *storage_;
  const std::size_t nC = std::size_t(BT) * C * sizeof(float);
  const std::size_t nF = std::size_t(BT) * Fl * sizeof(float);
  float *d_res = scratch("d_res"), *d_c = scratch("d_c"), *d_3c = scratch("d_3c");
  float *full = scratch("full_c"), *d_att = scratch("d_att");
  float *d_ff_a = scratch("d_ff_a"), *d_ff_b = scratch("d_ff_b");

  // d_res: dLoss/d(output) of this stage, from the head or from the next stage.
  if (stage_.head) {
    head_backward(slot, d_res, finalize);
    notify("lnf.w");
  }
  for (int l = last_block() - 1; l >= stage_.first_block; --l) {
    const std::string p = fmt::format("h.{}.", l);
    const Block a = block(slot, l);
    const int u = unit(p + "ln1.w");
    st.need_params(u, Pass::backward);
    const float* x_in = block_input(slot, l);
    restore_block(slot, l, a, x_in);  // unpack 16-bit copies, recompute what was not saved
    st.need_grads(u);
    // d_res holds dLoss/d(res3) for this rank's tokens.
    const float* d_out = gather(d_res, full);
    be.zero(d_ff_a, nF);
    be.matmul_backward(d_ff_a, G(p + "mlp.proj.w"), G(p + "mlp.proj.b"), d_out, a.fch_gelu,
                       P(p + "mlp.proj.w"), BT, Fl, C);
    round(d_ff_a, std::size_t(BT) * Fl);
    be.zero(d_ff_b, nF);
    be.gelu_backward(d_ff_b, a.fch, d_ff_a, std::size_t(BT) * Fl);
    round(d_ff_b, std::size_t(BT) * Fl);
    be.zero(d_c, nC);
    be.matmul_backward(d_c, G(p + "mlp.fc.w"), G(p + "mlp.fc.b"), d_ff_b, a.ln2_full,
                       P(p + "mlp.fc.w"), BT, C, Fl);
    round(d_c, std::size_t(BT) * C);
    be.layernorm_backward(d_res, G(p + "ln2.w"), G(p + "ln2.b"), reduce_row_parallel(d_c), a.res2,
                          P(p + "ln2.w"), a.ln2_mean, a.ln2_rstd, BTl, C);
    // d_res now holds dLoss/d(res2).
    d_out = gather(d_res, full);
    be.zero(d_c, std::size_t(BT) * Cl * sizeof(float));
    be.matmul_backward(d_c, G(p + "attn.proj.w"), G(p + "attn.proj.b"), d_out, a.atty,
                       P(p + "attn.proj.w"), BT, Cl, C);
    round(d_c, std::size_t(BT) * Cl);
    be.zero(d_3c, 3 * std::size_t(BT) * Cl * sizeof(float));
    be.attention_backward(d_3c, d_att, d_c, a.qkv, a.att, B, T, Cl, NHl);
    round(d_3c, 3 * std::size_t(BT) * Cl);
    be.zero(d_c, nC);
    be.matmul_backward(d_c, G(p + "attn.qkv.w"), G(p + "attn.qkv.b"), d_3c, a.ln1_full,
                       P(p + "attn.qkv.w"), BT, C, 3 * Cl);
    round(d_c, std::size_t(BT) * C);
    be.layernorm_backward(d_res, G(p + "ln1.w"), G(p + "ln1.b"), reduce_row_parallel(d_c), x_in,
                          P(p + "ln1.w"), a.ln1_mean, a.ln1_rstd, BTl, C);
    if (finalize || st.grads_leave_each_backward())
      sum_partial_grads({p + "ln1.w", p + "ln1.b", p + "ln2.w", p + "ln2.b"});
    st.done_params(u);
    st.done_grads(u, finalize);
    notify(p + "ln1.w");
  }
  if (!stage_.embedding) {  // d_res = dLoss/d(input): kept for the previous stage
    be.copy(act(slot, "d_input"), d_res, std::size_t(BTl) * C * sizeof(float));
    return;
  }
  const int Vl = tp_.local_vocab(cfg_), vlo = tp_.vocab_begin(cfg_);
  st.need_grads(unit("wte"));
  st.need_grads(unit("wpe"));
  be.position_backward(G("wpe"), d_res, BTl, T, first_token_, C);
  if ((finalize || st.grads_leave_each_backward()) && tp_.sp())
    tcomm_.all_reduce(G("wpe"), table_.at("wpe").numel);
  be.embedding_backward(G("wte"), gather(d_res, full), tok, vlo, Vl, BT, C);
  st.done_grads(unit("wpe"), finalize);
  st.done_grads(unit("wte"), finalize);
  notify("wte");
}

}  // namespace trident
