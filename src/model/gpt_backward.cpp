// GPT backward on one tensor rank and pipeline stage: the conjugates of
// forward's collectives (sum of input gradients into each parallel region;
// with SP, all-gather of the gradient leaving it, reduce-scatter of the one
// entering it). Split for the zero-bubble schedules (Qi et al. 2024, section
// 2): B computes the activation gradients the previous stage waits for and
// keeps the output gradient of each weight op in a W buffer; W computes the
// weight gradients from those and the saved inputs. backward() runs both in
// one pass, each weight op where its output gradient is made.
#include <fmt/format.h>

#include "model/gpt.hpp"

namespace trident {

void GptModel::keep_for_weights(int slot, int wbuf, const std::string& name, const float* src,
                                std::size_t n) {
  if (wbuf >= 0) backend_.copy(weight_input(slot, wbuf, name), src, n * sizeof(float));
}

void GptModel::head_backward(int slot, float* d_res, int wbuf, bool finalize) {
  const bool weights_now = wbuf < 0;
  const int C = cfg_.d_model, BT = BT_, BTl = BTl_;
  ComputeBackend& be = backend_;
  ModelStorage& st = *storage_;
  float* d_c = scratch("d_c");
  const float* lnf_all = tp_.sp() ? act(slot, "lnf_full") : act(slot, "lnf");
  be.zero(d_c, std::size_t(BT) * C * sizeof(float));
  // A whole table's gradients, on the first stage, collect here and at the very end.
  // The table's slot is taken before the norm's: the norm must not take the one slot
  // that fits the table.
  logits_backward(slot, d_c, lnf_all, weights_now, finalize);
  st.need_grads(unit("lnf.w"));  // the norm's weight gradients come with B (see norm_grads_done)
  round(d_c, std::size_t(BT) * C);
  be.zero(d_res, std::size_t(BTl) * C * sizeof(float));
  const float* d_lnf = reduce_row_parallel(d_c);
  be.layernorm_backward(d_res, G("lnf.w"), G("lnf.b"), d_lnf, output(slot), P("lnf.w"),
                        act(slot, "lnf_mean"), act(slot, "lnf_rstd"), BTl, C);
  st.done_params(unit("lnf.w"));
  if (!table_cut()) st.done_params(unit("wte"));  // the embedding's backward needs only gradients
  if (weights_now) finish_head_grads(finalize);
  else norm_grads_done(unit("lnf.w"), {"lnf.w", "lnf.b"});
}

void GptModel::norm_grads_done(int u, const std::vector<std::string>& names) {
  // B adds a norm's weight gradients (a sum over tokens, C floats) where the
  // fused backward does, in the same order, so W keeps neither the norm's
  // output gradient nor its input. Where gradients leave with every backward
  // they leave here, summed over the tensor group first, and W's are the rest.
  ModelStorage& st = *storage_;
  if (st.grads_leave_each_backward()) sum_partial_grads(names);
  st.done_grads(u, false);
}

void GptModel::finish_head_grads(bool finalize) {
  ModelStorage& st = *storage_;
  if (finalize || st.grads_leave_each_backward()) sum_partial_grads({"lnf.w", "lnf.b"});
  st.done_grads(unit("lnf.w"), finalize);
  // The head's copy is done (a cut table's units left in logits_backward).
  if (!stage_.embedding && !table_cut()) st.done_grads(unit("wte"), finalize);
}

void GptModel::block_backward(int slot, int l, int wbuf, bool finalize) {
  const bool weights_now = wbuf < 0;
  const int C = cfg_.d_model, BT = BT_, BTl = BTl_;
  const int Cl = tp_.local_width(cfg_), Fl = tp_.local_ff(cfg_);
  ComputeBackend& be = backend_;
  ModelStorage& st = *storage_;
  float *d_res = scratch("d_res"), *d_c = scratch("d_c"), *d_3c = scratch("d_3c");
  float* full = scratch("full_c");
  float *d_ff_a = scratch("d_ff_a"), *d_ff_b = scratch("d_ff_b");
  const std::string p = fmt::format("h.{}.", l);
  auto gw = [&](const char* n) { return weights_now ? G(p + n) : nullptr; };
  auto keep = [&](const char* n, const float* src, std::size_t count) {
    keep_for_weights(slot, wbuf, p + n, src, count);
  };
  const Block a = block(slot, l);
  const int u = unit(p + "ln1.w");
  st.need_params(u, Pass::backward);
  const float* x_in = block_input(slot, l);
  restore_block(slot, l, a, x_in);  // unpack 16-bit copies, recompute what was not saved
  st.need_grads(u);  // the norms' weight gradients come with B
  // d_res holds dLoss/d(res3) for this rank's tokens.
  MatrixIn d_out = projection_grad(d_res, full);
  keep("d_proj", d_out.values, std::size_t(BT) * C);
  be.matmul_backward(d_ff_a, gw("mlp.proj.w"), gw("mlp.proj.b"), d_out,
                     saved_input(a.fch_gelu, a.fch_gelu_16), weight(p + "mlp.proj.w"), BT, Fl, C,
                     InputGrad::write);
  const MatrixIn d_fc = gelu_grad_operand(d_ff_b, a.fch, packs_bits() ? a.fch_16 : nullptr,
                                          d_ff_a, std::size_t(BT) * Fl);
  keep("d_fc", d_ff_b, std::size_t(BT) * Fl);
  be.matmul_backward(d_c, gw("mlp.fc.w"), gw("mlp.fc.b"), d_fc, saved_input(a.ln2_full, a.ln2_16),
                     weight(p + "mlp.fc.w"), BT, C, Fl, InputGrad::write);
  round(d_c, std::size_t(BT) * C);
  const float* d_ln2 = reduce_row_parallel(d_c);
  be.layernorm_backward(d_res, G(p + "ln2.w"), G(p + "ln2.b"), d_ln2, a.res2, P(p + "ln2.w"),
                        a.ln2_mean, a.ln2_rstd, BTl, C);
  // d_res now holds dLoss/d(res2).
  d_out = projection_grad(d_res, full);
  keep("d_attn", d_out.values, std::size_t(BT) * C);
  be.matmul_backward(d_c, gw("attn.proj.w"), gw("attn.proj.b"), d_out,
                     saved_input(a.atty, a.atty_16), weight(p + "attn.proj.w"), BT, Cl, C,
                     InputGrad::write);
  const MatrixIn d_qkv = attention_grad_operand(a, gemm_operand(d_c, std::size_t(BT) * Cl), d_3c);
  keep("d_qkv", d_3c, 3 * std::size_t(BT) * Cl);
  be.matmul_backward(d_c, gw("attn.qkv.w"), gw("attn.qkv.b"), d_qkv,
                     saved_input(a.ln1_full, a.ln1_16), weight(p + "attn.qkv.w"), BT, C, 3 * Cl,
                     InputGrad::write);
  round(d_c, std::size_t(BT) * C);
  const float* d_ln1 = reduce_row_parallel(d_c);
  be.layernorm_backward(d_res, G(p + "ln1.w"), G(p + "ln1.b"), d_ln1, x_in, P(p + "ln1.w"),
                        a.ln1_mean, a.ln1_rstd, BTl, C);
  st.done_params(u);
  if (weights_now) finish_block_grads(l, finalize);
  else norm_grads_done(u, {p + "ln1.w", p + "ln1.b", p + "ln2.w", p + "ln2.b"});
}

void GptModel::finish_block_grads(int l, bool finalize) {
  ModelStorage& st = *storage_;
  const std::string p = fmt::format("h.{}.", l);
  if (finalize || st.grads_leave_each_backward())
    sum_partial_grads({p + "ln1.w", p + "ln1.b", p + "ln2.w", p + "ln2.b"});
  st.done_grads(unit(p + "ln1.w"), finalize);
}

void GptModel::embedding_grads(int slot, const float* d_emb, bool finalize) {
  ComputeBackend& be = backend_;
  ModelStorage& st = *storage_;
  st.need_grads(unit("wpe"));
  be.position_backward(G("wpe"), d_emb, BTl_, cfg_.seq_len, first_token_, cfg_.d_model);
  if ((finalize || st.grads_leave_each_backward()) && tp_.sp())
    tcomm_.all_reduce(G("wpe"), table_.at("wpe").numel);
  table_grads_from_tokens(slot, gather(d_emb, scratch("full_c")), finalize);
  st.done_grads(unit("wpe"), finalize);
}

void GptModel::backward_pass(int slot, int wbuf, int send_buffer, const GradsReadyFn& ready,
                             bool finalize) {
  const bool weights_now = wbuf < 0;
  auto notify = [&](const std::string& first) {
    if (weights_now && ready && finalize) ready(table_.at(first).offset);
  };
  // d_res: dLoss/d(output) of this stage, from the head or from the next stage.
  float* d_res = scratch("d_res");
  if (stage_.head) {
    head_backward(slot, d_res, wbuf, finalize);
    notify("lnf.w");
  }
  for (int l = last_block() - 1; l >= stage_.first_block; --l) {
    block_backward(slot, l, wbuf, finalize);
    notify(fmt::format("h.{}.ln1.w", l));
  }
  const std::size_t n = std::size_t(BTl_) * cfg_.d_model;
  if (!stage_.embedding) {  // d_res = dLoss/d(input): kept for the previous stage
    backend_.copy(send_buffer_f32(send_buffer), d_res, n * sizeof(float));
    return;
  }
  keep_for_weights(slot, wbuf, "d_embed", d_res, n);
  if (!weights_now) return;
  embedding_grads(slot, d_res, finalize);
  notify("wte");
}

void GptModel::backward(int slot, const GradsReadyFn& ready, bool finalize, int send_buffer) {
  backward_pass(slot, /*wbuf=*/-1, send_buffer, ready, finalize);
}

void GptModel::backward_input(int slot, int wbuf, int send_buffer) {
  if (!splits_backward_) throw std::logic_error("backward_input needs weight_buffers");
  backward_pass(slot, wbuf, send_buffer, nullptr, false);
}

void GptModel::backward_weights(int slot, int wbuf, const GradsReadyFn& ready, bool finalize) {
  const int C = cfg_.d_model, BT = BT_;
  const int Cl = tp_.local_width(cfg_), Fl = tp_.local_ff(cfg_);
  ComputeBackend& be = backend_;
  ModelStorage& st = *storage_;
  auto notify = [&](const std::string& first) {
    if (ready && finalize) ready(table_.at(first).offset);
  };
  if (stage_.head) {
    const float* lnf_all = tp_.sp() ? act(slot, "lnf_full") : act(slot, "lnf");
    logits_backward(slot, nullptr, lnf_all, true, finalize);  // the table's slot first
    st.need_grads(unit("lnf.w"));  // the norm's gradients came with B
    finish_head_grads(finalize);
    notify("lnf.w");
  }
  for (int l = last_block() - 1; l >= stage_.first_block; --l) {
    const std::string p = fmt::format("h.{}.", l);
    // B kept the output gradients as the GEMMs read them: bf16 values in a bf16 run.
    auto d = [&](const char* n) { return bf16_valued(weight_input(slot, wbuf, p + n)); };
    const Block a = block(slot, l);
    const int u = unit(p + "ln1.w");
    // The weight ops read the block's saved inputs: what lives in the
    // working buffer is unpacked (16-bit) or recomputed again.
    if (policy_.recompute == Recompute::full) {
      st.need_params(u, Pass::backward);
      restore_block(slot, l, a, block_input(slot, l));
      st.done_params(u);
    } else {
      unpack_block(slot, l);
      regather_norms(a);
    }
    st.need_grads(u);
    be.matmul_backward(nullptr, G(p + "mlp.proj.w"), G(p + "mlp.proj.b"), d("d_proj"),
                       saved_input(a.fch_gelu, a.fch_gelu_16), nullptr, BT, Fl, C,
                       InputGrad::add);
    be.matmul_backward(nullptr, G(p + "mlp.fc.w"), G(p + "mlp.fc.b"), d("d_fc"),
                       saved_input(a.ln2_full, a.ln2_16), nullptr, BT, C, Fl,
                       InputGrad::add);
    be.matmul_backward(nullptr, G(p + "attn.proj.w"), G(p + "attn.proj.b"), d("d_attn"),
                       saved_input(a.atty, a.atty_16), nullptr, BT, Cl, C,
                       InputGrad::add);
    be.matmul_backward(nullptr, G(p + "attn.qkv.w"), G(p + "attn.qkv.b"), d("d_qkv"),
                       saved_input(a.ln1_full, a.ln1_16), nullptr, BT, C, 3 * Cl,
                       InputGrad::add);
    finish_block_grads(l, finalize);
    notify(p + "ln1.w");
  }
  if (!stage_.embedding) return;
  embedding_grads(slot, weight_input(slot, wbuf, "d_embed"), finalize);
  notify("wte");
}

}  // namespace trident
