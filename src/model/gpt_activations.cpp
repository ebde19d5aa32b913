// Where a block's activations live (see activation_policy.hpp): the
// micro-batch's saved activations, or the one-block working buffer; and the steps that
// move between them: saving after forward, restoring or recomputing before
// backward.
#include <fmt/format.h>

#include <algorithm>

#include "model/gpt.hpp"

namespace trident {
namespace {

// gathered: a norm's output all-gathered over the tensor group for the
// column-parallel linear (SP). Never saved: backward gathers it again from
// the saved local part (Korthikanti et al. 2022, section 4.2.2), so SP keeps
// 1/tp of the norms' outputs.
enum class Kind { internal, stat, residual, gathered };
struct ActSpec {
  const char* name;
  Kind kind;
  std::int64_t n;
};

// Every activation one block's backward reads, in forward order.
std::vector<ActSpec> block_activations(const GptConfig& c, const TokenLayout& tokens,
                                       const TensorParallelLayout& tp) {
  const std::int64_t BT = tokens.rows(), BTl = tp.local_tokens(int(BT));
  const std::int64_t C = c.d_model, Cl = tp.local_width(c), Fl = tp.local_ff(c);
  const std::int64_t QKVl = tp.local_qkv_width(c), FCl = tp.local_fc_width(c);
  // Attention keeps one log-sum-exp per query and head, not the T x T probabilities.
  const std::int64_t lse = BT * tp.local_heads(c);
  // Residual stream and norms: this rank's tokens. Everything between the
  // column- and row-parallel layers: all tokens, this rank's features. RMSNorm
  // keeps no mean; qkv is the rotated q and k (RoPE's backward needs no
  // input); fch is SwiGLU's [gate | up], fch_gelu its output.
  const bool layernorm = c.norm == NormKind::layernorm;
  std::vector<ActSpec> v;
  auto norm = [&](const char* out, const char* mean, const char* rstd, const char* full) {
    v.push_back({out, Kind::internal, BTl * C});
    if (layernorm) v.push_back({mean, Kind::stat, BTl});
    v.push_back({rstd, Kind::stat, BTl});
    if (tp.sp()) v.push_back({full, Kind::gathered, BT * C});
  };
  norm("ln1", "ln1_mean", "ln1_rstd", "ln1_full");
  v.insert(v.end(), {{"qkv", Kind::internal, BT * QKVl}, {"atty", Kind::internal, BT * Cl},
                     {"lse", Kind::stat, lse}, {"res2", Kind::residual, BTl * C}});
  norm("ln2", "ln2_mean", "ln2_rstd", "ln2_full");
  v.insert(v.end(), {{"fch", Kind::internal, BT * FCl}, {"fch_gelu", Kind::internal, BT * Fl},
                     {"res3", Kind::residual, BTl * C}});
  return v;
}

bool kept(const ActSpec& a, Recompute r) {
  if (a.kind == Kind::gathered) return false;
  if (r == Recompute::full) return a.kind == Kind::residual && std::string(a.name) == "res3";
  return true;  // none and selective keep everything (see activation_policy.hpp)
}
bool kept_f32(const ActSpec& a, const ActivationPolicy& p) {
  return kept(a, p.recompute) &&
         (p.store == DType::f32 || a.kind == Kind::stat || a.kind == Kind::residual);
}

void add_flat(TensorTable& t, std::string name, std::int64_t n) {
  TensorInfo info;
  info.name = std::move(name);
  info.shape = {n};
  t.add(std::move(info));
}

}  // namespace

TensorTable GptModel::saved_activation_table(const GptConfig& c, const TokenLayout& tokens,
                                             const TensorParallelLayout& tp, const StageSpec& st,
                                             const ActivationPolicy& policy) {
  const std::int64_t BT = tokens.rows(), BTl = tp.local_tokens(int(BT));
  const std::int64_t C = c.d_model;
  const bool sp = tp.sp();
  const int end = st.first_block + st.blocks(c.layers);
  TensorTable t;
  auto add = [&t](std::string name, std::int64_t n) { add_flat(t, std::move(name), n); };
  add("encoded", BTl * C);  // the embeddings' output, or the previous stage's
  for (int l = st.first_block; l < end; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    for (const ActSpec& a : block_activations(c, tokens, tp)) {
      if (!kept_f32(a, policy)) continue;
      // Partitioned: a block's output is the next block's input; the stage's
      // output stays whole (the head and the next stage read it).
      if (policy.partition && a.kind == Kind::residual && l + 1 < end) add(p + "res3_part", a.n / tp.size);
      else add(p + a.name, a.n);
    }
  }
  if (st.head) {
    add("lnf", BTl * C);
    if (c.norm == NormKind::layernorm) add("lnf_mean", BTl);
    add("lnf_rstd", BTl);
    if (sp) add("lnf_full", BT * C);
    add("logits", BT * tp.local_vocab(c)), add("losses", BT);
    add("xent_max", BT), add("xent_packed", 2 * BT);
  }
  return t;
}

TensorTable GptModel::saved_16bit_table(const GptConfig& c, const TokenLayout& tokens,
                                        const TensorParallelLayout& tp, const StageSpec& st,
                                        const ActivationPolicy& policy) {
  TensorTable t;
  if (policy.store == DType::f32) return t;
  for (int l = st.first_block; l < st.first_block + st.blocks(c.layers); ++l)
    for (const ActSpec& a : block_activations(c, tokens, tp))
      if (kept(a, policy.recompute) && !kept_f32(a, policy))
        add_flat(t, fmt::format("h.{}.{}", l, a.name), a.n);
  return t;
}

TensorTable GptModel::work_table(const GptConfig& c, const TokenLayout& tokens,
                                 const TensorParallelLayout& tp, const ActivationPolicy& policy) {
  TensorTable t;
  for (const ActSpec& a : block_activations(c, tokens, tp))
    if (!kept_f32(a, policy) || (policy.partition && std::string(a.name) == "res3"))
      add_flat(t, a.name, a.n);
  return t;
}

TensorTable GptModel::scratch_table(const GptConfig& c, const TokenLayout& tokens,
                                    const TensorParallelLayout& tp, const ActivationPolicy& policy) {
  // Reused layer after layer and micro-batch after micro-batch: activation
  // gradients are never kept for the whole stack. Counted as activations.
  const std::int64_t BT = tokens.rows(), BTl = tp.local_tokens(int(BT));
  const std::int64_t C = c.d_model, Cl = tp.local_width(c), Fl = tp.local_ff(c);
  const std::int64_t QKVl = tp.local_qkv_width(c), FCl = tp.local_fc_width(c);
  TensorTable t;
  auto add = [&t](std::string name, std::int64_t n) { add_flat(t, std::move(name), n); };
  add("full_c", BT * C), add("d_res", BTl * C), add("d_c", BT * C), add("d_3c", BT * QKVl);
  add("d_ff_a", BT * Fl), add("d_ff_b", BT * FCl);
  if (tp.sp()) add("local_c", BTl * C), add("sp_pack", 4 * C);
  // bf16: the bits of the activation a GEMM reads next (gemm_operand), as
  // wide as the widest (attention's output gradient and qkv's side by side),
  // two to a float.
  if (policy.store == DType::bf16)
    add("gemm_bits", (BT * std::max({C, Cl + QKVl, FCl}) + 1) / 2);
  return t;
}

float* GptModel::home(const MicroBatchActs& acts, const ActHome& at) {
  return at.in_saved ? acts.saved + at.offset : workspace_->work.f32() + at.offset;
}

std::uint16_t* GptModel::bits_home(const MicroBatchActs& acts, std::size_t offset) {
  return offset == BlockHandles::none ? nullptr : acts.saved16 + offset;
}

GptModel::Block GptModel::block(const MicroBatchActs& acts, int l) {
  const BlockHandles& h = layer(l);
  auto a = [&](const ActHome& at) { return home(acts, at); };
  auto bits = [&](std::size_t offset) { return bits_home(acts, offset); };
  const bool sp = tp_.sp();
  Block b{a(h.ln1), a(h.ln1_mean), a(h.ln1_rstd), nullptr, a(h.qkv), a(h.atty), a(h.lse),
          a(h.res2), a(h.ln2), a(h.ln2_mean), a(h.ln2_rstd), nullptr, a(h.fch), a(h.fch_gelu),
          a(h.res3), bits(h.ln1_16), bits(h.qkv_16), bits(h.atty_16), bits(h.ln2_16),
          bits(h.fch_gelu_16), bits(h.fch_16)};
  b.ln1_full = sp ? a(h.ln1_full) : b.ln1;  // without SP the local norm output is all tokens
  b.ln2_full = sp ? a(h.ln2_full) : b.ln2;
  return b;
}

const float* GptModel::output(const MicroBatchActs& acts) {
  return last_block() > stage_.first_block ? block(acts, last_block() - 1).res3
                                           : act(acts, ends_.encoded);
}

const float* GptModel::block_input(const MicroBatchActs& acts, int l) {
  if (l == stage_.first_block) return act(acts, ends_.encoded);
  const BlockHandles& previous = layer(l - 1);
  if (const TensorInfo* part = previous.res3_part) {
    // Backward never writes res3 (a recompute stops before it): gather there.
    float* whole = home(acts, previous.res3);
    group_->gather_tokens(acts.saved + part->offset, whole, part->numel);
    return whole;
  }
  return home(acts, previous.res3);
}

void GptModel::save_block(const MicroBatchActs& acts, int l) {
  const BlockHandles& h = layer(l);
  if (const TensorInfo* part = h.res3_part)
    backend_.copy(acts.saved + part->offset,
                  home(acts, h.res3) + std::size_t(tp_.rank) * part->numel,
                  part->numel * sizeof(float));
  // The 16-bit copies forward's rounding did not write.
  float* work = workspace_->work.f32();
  for (const PackedCopy& c : h.saved_copies)
    backend_.convert(acts.saved16 + c.bits, policy_.store, work + c.work, DType::f32, c.numel);
}

void GptModel::unpack_block(const MicroBatchActs& acts, int l) {
  // All but what backward reads as bits alone (GELU's backward reads fch's).
  float* work = workspace_->work.f32();
  for (const PackedCopy& c : layer(l).unpacked_copies)
    backend_.convert(work + c.work, DType::f32, acts.saved16 + c.bits, policy_.store, c.numel);
}

void GptModel::restore_block(const MicroBatchActs& acts, int l, const Block& a, const float* x) {
  unpack_block(acts, l);
  if (policy_.recompute == Recompute::full) block_forward(a, x, l, /*recompute=*/true);
  else regather_norms(a);
}

void GptModel::regather_norms(const Block& a) {
  gather(a.ln1, a.ln1_full);
  gather(a.ln2, a.ln2_full);
}

}  // namespace trident
