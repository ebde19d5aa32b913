// The model's handles (gpt_handles.hpp), resolved by name once at
// construction: the only place the model's step path meets tensor names.
#include "model/gpt_handles.hpp"

#include <fmt/format.h>

#include "model/gpt.hpp"

namespace trident {

BlockHandles GptModel::resolve_block(int l) const {
  const std::string p = fmt::format("h.{}.", l);
  BlockHandles h;
  auto param = [&](const char* n) { return &table_.at(p + n); };
  // What the model's shape may leave out: biases, LayerNorm's .b.
  auto optional = [&](const char* n) { return table_.find(p + n); };
  h.ln1_w = param("ln1.w"), h.ln1_b = optional("ln1.b");
  h.qkv_w = param("attn.qkv.w"), h.qkv_b = optional("attn.qkv.b");
  h.attn_proj_w = param("attn.proj.w"), h.attn_proj_b = optional("attn.proj.b");
  h.ln2_w = param("ln2.w"), h.ln2_b = optional("ln2.b");
  h.fc_w = param("mlp.fc.w"), h.fc_b = optional("mlp.fc.b");
  h.mlp_proj_w = param("mlp.proj.w"), h.mlp_proj_b = optional("mlp.proj.b");
  h.unit = h.ln1_w->unit;
  for (const TensorInfo* t : {h.ln1_w, h.ln1_b, h.ln2_w, h.ln2_b})
    if (t) h.norms.push_back(t);

  // Saved where the saved table has it, else in the working buffer.
  auto home = [&](const char* n) -> ActHome {
    if (const TensorInfo* t = saved_.find(p + n)) return {true, t->offset};
    return {false, work_.at(n).offset};
  };
  const bool layernorm = cfg_.norm == NormKind::layernorm;  // RMSNorm keeps no mean
  h.ln1 = home("ln1"), h.ln1_rstd = home("ln1_rstd");
  h.qkv = home("qkv"), h.atty = home("atty"), h.lse = home("lse"), h.res2 = home("res2");
  h.ln2 = home("ln2"), h.ln2_rstd = home("ln2_rstd");
  if (layernorm) h.ln1_mean = home("ln1_mean"), h.ln2_mean = home("ln2_mean");
  h.fch = home("fch"), h.fch_gelu = home("fch_gelu"), h.res3 = home("res3");
  const bool sp = tp_.sp();
  if (sp) h.ln1_full = home("ln1_full"), h.ln2_full = home("ln2_full");

  // With SP the norms' bits would be this rank's tokens only: not read as bits.
  auto bits = [&](const char* n) {
    const TensorInfo* t = packs_bits() ? saved16_.find(p + n) : nullptr;
    return t ? t->offset : BlockHandles::none;
  };
  h.ln1_16 = sp ? BlockHandles::none : bits("ln1");
  h.qkv_16 = bits("qkv"), h.atty_16 = bits("atty");
  h.ln2_16 = sp ? BlockHandles::none : bits("ln2");
  h.fch_gelu_16 = bits("fch_gelu"), h.fch_16 = bits("fch");
  // RoPE, grouped attention and SwiGLU read and write values: their inputs
  // are saved and unpacked as plain copies, never read as bits alone.
  if (math_.llama_attention()) h.qkv_16 = BlockHandles::none;
  if (cfg_.mlp == MlpKind::swiglu) h.fch_16 = BlockHandles::none;
  h.res3_part = saved_.find(p + "res3_part");

  for (const TensorInfo& t : saved16_.tensors()) {
    if (t.name.compare(0, p.size(), p) != 0) continue;  // another layer's
    const PackedCopy copy{t.offset, work_.at(t.name.substr(p.size())).offset, t.numel};
    const std::size_t o = t.offset;
    const bool read_as_bits =  // GELU's backward reads fch's bits
        o == h.ln1_16 || o == h.qkv_16 || o == h.ln2_16 || o == h.fch_gelu_16 ||
        (o == h.fch_16 && packs_bits());
    const bool written_by_forward = read_as_bits || o == h.atty_16 || o == h.fch_16;
    if (!written_by_forward) h.saved_copies.push_back(copy);
    if (!read_as_bits) h.unpacked_copies.push_back(copy);
  }

  auto place = [&](const char* n) { return weight_layout_.places.at(p + n); };
  h.d_proj = place("d_proj"), h.d_fc = place("d_fc");
  h.d_attn = place("d_attn"), h.d_qkv = place("d_qkv");
  return h;
}

void GptModel::resolve_handles() {
  for (int l = stage_.first_block; l < last_block(); ++l) blocks_.push_back(resolve_block(l));

  ends_.wte = table_.find("wte"), ends_.wpe = table_.find("wpe");
  ends_.lnf_w = table_.find("lnf.w"), ends_.lnf_b = table_.find("lnf.b");
  ends_.lm_head = table_.find("lm_head.w");
  if (stage_.head)
    for (const TensorInfo* t : {ends_.lnf_w, ends_.lnf_b})
      if (t) ends_.lnf_norms.push_back(t);
  ends_.encoded = saved_.find("encoded");
  ends_.lnf = saved_.find("lnf"), ends_.lnf_full = saved_.find("lnf_full");
  ends_.lnf_mean = saved_.find("lnf_mean"), ends_.lnf_rstd = saved_.find("lnf_rstd");
  ends_.logits = saved_.find("logits"), ends_.losses = saved_.find("losses");
  ends_.xent_max = saved_.find("xent_max"), ends_.xent_packed = saved_.find("xent_packed");
  if (stage_.embedding) ends_.d_embed = weight_layout_.places.at("d_embed");

  ScratchHandles& s = scratch_handles_;
  s.full_c = scratch_.find("full_c"), s.d_res = scratch_.find("d_res");
  s.d_c = scratch_.find("d_c"), s.d_3c = scratch_.find("d_3c");
  s.d_ff_a = scratch_.find("d_ff_a"), s.d_ff_b = scratch_.find("d_ff_b");
  s.local_c = scratch_.find("local_c"), s.sp_pack = scratch_.find("sp_pack");
  s.gemm_bits = scratch_.find("gemm_bits");
}

}  // namespace trident
