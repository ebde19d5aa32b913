#include "model/param_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace trident {

namespace {

// One block's tensors, in the order forward reads them (global layouts:
// param_table.hpp).
template <class Add>
void add_block(TensorTable& t, Add& add, const GptConfig& c, int l) {
  const std::int64_t C = c.d_model, F = c.d_ff(), KV = c.kv_width();
  const std::string p = fmt::format("h.{}.", l);
  const bool layernorm = c.norm == NormKind::layernorm;
  auto norm = [&](const char* name) {
    add(p + name + ".w", {C}, -1, l, false);
    if (layernorm) add(p + name + ".b", {C}, -1, l, false);
  };
  norm("ln1");
  if (c.kv_head_count() == c.heads) {
    add(p + "attn.qkv.w", {3, C, C}, 1, l, true);
    if (c.bias) add(p + "attn.qkv.b", {3, C}, 1, l, false);
  } else {
    auto segmented = [&](std::string name, std::vector<std::int64_t> global, bool decay) {
      add(std::move(name), std::move(global), 0, l, decay);
      t.last().segments = {C, KV, KV};
    };
    segmented(p + "attn.qkv.w", {C + 2 * KV, C}, true);
    if (c.bias) segmented(p + "attn.qkv.b", {C + 2 * KV}, false);
  }
  add(p + "attn.proj.w", {C, C}, 1, l, true);
  if (c.bias) add(p + "attn.proj.b", {C}, -1, l, false);
  norm("ln2");
  if (c.mlp == MlpKind::swiglu) {
    add(p + "mlp.fc.w", {2, F, C}, 1, l, true);
    if (c.bias) add(p + "mlp.fc.b", {2, F}, 1, l, false);
  } else {
    add(p + "mlp.fc.w", {F, C}, 0, l, true);
    if (c.bias) add(p + "mlp.fc.b", {F}, 0, l, false);
  }
  add(p + "mlp.proj.w", {C, F}, 1, l, true);
  if (c.bias) add(p + "mlp.proj.b", {C}, -1, l, false);
}

}  // namespace

TensorTable build_gpt_param_table(const GptConfig& c, const TensorParallelLayout& tp,
                                  const UnitLayout& units, const StageSpec& stage) {
  const std::int64_t C = c.d_model, T = c.seq_len, V = c.vocab, n = tp.size;
  const std::int64_t Vl = tp.local_vocab(c);
  TensorTable t;
  int unit = 0;
  // local shape, global shape, split dim (-1: replicated)
  auto add = [&](std::string name, std::vector<std::int64_t> global, int split, int layer,
                 bool decay, bool primary = true) {
    TensorInfo info;
    info.name = std::move(name);
    info.global_shape = global;
    info.shape = global;
    const bool vocab_rows = info.name == "wte" || info.name == "lm_head.w";
    if (split >= 0 && n > 1) {
      info.shape[split] = vocab_rows ? Vl : global[split] / n;
      info.split_dim = split;
      info.shard_rank = tp.rank;
    } else if (vocab_rows) {
      info.shape[0] = Vl;  // padding rows even unsplit: same kernels for every tp
      info.split_dim = 0;
    }
    info.layer = layer;
    info.weight_decay = decay;
    info.primary = primary;
    info.unit = unit;
    t.add(std::move(info));
  };
  auto end_unit = [&] {
    t.align_end(units.align);
    ++unit;
  };
  // The token embedding, whole or cut into dp x table_units pieces of whole
  // rows (each a multiple of kAlign elements), rank r's pieces adjacent in the
  // tensor: the ZeRO slices of a rank stay one range of the tensor.
  auto add_table = [&](bool primary, const char* name = "wte") {
    add(name, {V, C}, 0, -1, true, primary);
    const int K = units.table_units;
    if (K <= 1) return end_unit();
    TensorInfo& w = t.last();
    const std::int64_t P = std::int64_t(K) * units.dp, row_align = TensorTable::kAlign /
                                                                  std::gcd(std::size_t(C), TensorTable::kAlign);
    const std::int64_t rows = ((Vl + P - 1) / P + row_align - 1) / row_align * row_align;
    w.units = K;
    w.pieces = int(P);
    w.piece = std::size_t(rows * C);
    t.pad_end_to(w.offset + std::size_t(P) * w.piece);
    unit += K - 1;
    end_unit();
  };
  // The embedding table is a unit of its own wherever it appears (the first
  // stage, and the last as the tied head), so ZeRO slices it the same way on
  // both and the two copies' gradients can be summed slice by slice.
  if (stage.embedding) {
    add_table(true);
    if (c.positions == PositionEncoding::learned) add("wpe", {T, C}, -1, -1, true), end_unit();
  }
  const int last = stage.num_blocks < 0 ? c.layers : stage.first_block + stage.num_blocks;
  for (int l = stage.first_block; l < last; ++l) add_block(t, add, c, l), end_unit();
  if (stage.head) {
    add("lnf.w", {C}, -1, -1, false);
    if (c.norm == NormKind::layernorm) add("lnf.b", {C}, -1, -1, false);
    end_unit();
    // The head's table, last in the arena since the head's backward finishes
    // it first: the untied head's own, or the last stage's copy of the tied
    // embedding (the first stage's copy is the one saved).
    if (!c.tied_embeddings) add_table(true, "lm_head.w");
    else if (!stage.embedding) add_table(false);
  }
  return t;
}

int table_units_for_blocks(const GptConfig& c, const TensorParallelLayout& tp) {
  const std::size_t block = build_gpt_param_table(c, tp, {}, StageSpec{0, 1, false, false}).size();
  const std::size_t table = std::size_t(tp.local_vocab(c)) * std::size_t(c.d_model);
  return int(std::max<std::size_t>(1, (table + block - 1) / block));
}

}  // namespace trident
