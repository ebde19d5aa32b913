// What B keeps for W (Qi et al. 2024, section 2: B needs part of what F saved,
// W only the linears' inputs and output gradients) and where it keeps it.
// Once B has passed a block, what only B reads (the QKV projections, the
// attention probabilities, the GELU inputs, the residual stream the norms
// read: B adds the norms' weight gradients itself) is dead, so the output
// gradients B keeps go into its place in the micro-batch's saved activations; what is
// written before enough of it is dead goes to weight_inputs (MicroBatchActs).
#include <fmt/format.h>

#include <algorithm>

#include "model/gpt.hpp"

namespace trident {
namespace {

std::size_t aligned(std::size_t n) {
  return (n + TensorTable::kAlign - 1) / TensorTable::kAlign * TensorTable::kAlign;
}

}  // namespace

TensorTable GptModel::weight_input_table(const GptConfig& c, const TokenLayout& tokens,
                                         const TensorParallelLayout& tp, const StageSpec& st) {
  const std::int64_t BT = tokens.rows(), BTl = tp.local_tokens(int(BT));
  const std::int64_t C = c.d_model, FCl = tp.local_fc_width(c), QKVl = tp.local_qkv_width(c);
  TensorTable t;
  auto add = [&t](std::string name, std::int64_t n) {
    TensorInfo info;
    info.name = std::move(name);
    info.shape = {n};
    t.add(std::move(info));
  };
  // The head's own gradient is the saved logits.
  for (int l = st.first_block + st.blocks(c.layers) - 1; l >= st.first_block; --l) {
    const std::string p = fmt::format("h.{}.", l);
    add(p + "d_proj", BT * C), add(p + "d_fc", BT * FCl), add(p + "d_attn", BT * C);
    add(p + "d_qkv", BT * QKVl);
  }
  if (st.embedding) add("d_embed", BTl * C);
  return t;
}

WeightInputLayout GptModel::weight_input_layout(const GptConfig& c, const TokenLayout& tokens,
                                                const TensorParallelLayout& tp,
                                                const StageSpec& st,
                                                const ActivationPolicy& policy) {
  const TensorTable saved = saved_activation_table(c, tokens, tp, st, policy);
  const TensorTable all = weight_input_table(c, tokens, tp, st);
  WeightInputLayout out;
  // Dead regions of the saved activations (offset, elements), in the order B is done with them.
  std::vector<std::pair<std::size_t, std::size_t>> dead;
  auto dies = [&](const std::string& name) {
    if (const TensorInfo* t = saved.find(name)) dead.push_back({t->offset, t->numel});
  };
  auto keep = [&](const std::string& name) {
    const std::size_t n = all.at(name).numel;
    auto best = dead.end();  // the smallest dead region it fits in
    for (auto it = dead.begin(); it != dead.end(); ++it)
      if (it->second >= n && (best == dead.end() || it->second < best->second)) best = it;
    if (best == dead.end()) {
      TensorInfo info;
      info.name = name;
      info.shape = {std::int64_t(n)};
      out.places[name] = {false, out.buffer.add(std::move(info)).offset};
      return;
    }
    out.places[name] = {true, best->first};
    out.in_saved += n;
    const std::size_t used = std::min(aligned(n), best->second);
    best->first += used, best->second -= used;
  };
  // The order of head_backward and block_backward: each keep after the reads
  // it must not clobber. A full recompute reruns each block's forward in W
  // from its input, which then stays.
  const bool inputs_die = policy.recompute != Recompute::full;
  const int top = st.first_block + st.blocks(c.layers) - 1;
  for (int l = top; l >= st.first_block; --l) {
    const std::string p = fmt::format("h.{}.", l);
    // The stage's output: sent by F (or read by the head's norm in B).
    if (l == top) dies(p + "res3");
    keep(p + "d_proj");
    dies(p + "fch");  // gelu_backward read it
    keep(p + "d_fc");
    dies(p + "res2");  // the second norm's backward read it
    keep(p + "d_attn");
    // attention_backward read them; its output atty stays: W reads it.
    dies(p + "qkv"), dies(p + "lse");
    keep(p + "d_qkv");
    // The block's input, read by the first norm's backward.
    if (inputs_die) dies(l == st.first_block ? "encoded" : fmt::format("h.{}.res3", l - 1));
  }
  if (st.embedding) keep("d_embed");
  out.buffer.align_end(TensorTable::kAlign);
  return out;
}

}  // namespace trident
