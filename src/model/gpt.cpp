#include "model/gpt.hpp"

#include <fmt/format.h>

#include "model/gpt_params.hpp"

namespace trident {
namespace {
void add_flat(TensorTable& t, std::string name, std::int64_t n) {
  TensorInfo info;
  info.name = std::move(name);
  info.shape = {n};
  t.add(std::move(info));
}
}  // namespace

GptModel::GptModel(const GptConfig& c, int micro_batch, ComputeBackend& backend,
                   MemoryLedger& ledger, const GptModelOptions& o)
    : cfg_(c),
      B_(micro_batch),
      backend_(backend),
      tp_(o.tp),
      tcomm_(o.tensor_comm, o.tp),
      stage_(o.stage),
      table_(build_gpt_param_table(c, o.tp, o.unit_align, o.stage)) {
  if (!o.storage) own_storage_ = std::make_unique<FullStorage>(table_, backend, ledger);
  storage_ = o.storage ? o.storage : own_storage_.get();
  BT_ = B_ * c.seq_len;
  BTl_ = tp_.local_tokens(BT_);
  first_token_ = tp_.first_local_token(BT_);
  saved_ = saved_activation_table(c, B_, tp_, stage_);
  saved_.align_end(TensorTable::kAlign);  // slots start vector-aligned
  scratch_ = scratch_table(c, B_, tp_);
  acts_ = Arena(backend, ledger, MemCategory::activations, saved_.size() * o.activation_slots);
  scratch_arena_ = Arena(backend, ledger, MemCategory::activations, scratch_.size());
  io_ = Arena(backend, ledger, MemCategory::activations, 2 * std::size_t(BT_) * o.activation_slots,
              DType::i32);
  host_losses_.resize(BT_);
}

TensorTable GptModel::saved_activation_table(const GptConfig& c, int micro_batch,
                                             const TensorParallelLayout& tp, const StageSpec& st) {
  const std::int64_t BT = std::int64_t(micro_batch) * c.seq_len, BTl = tp.local_tokens(int(BT));
  const std::int64_t C = c.d_model, Cl = tp.local_width(c), Fl = tp.local_ff(c);
  const std::int64_t att = std::int64_t(micro_batch) * tp.local_heads(c) * c.seq_len * c.seq_len;
  const bool sp = tp.sp();
  TensorTable t;
  auto add = [&t](std::string name, std::int64_t n) { add_flat(t, std::move(name), n); };
  // Residual stream and norms: this rank's tokens. Everything between the
  // column- and row-parallel layers: all tokens, this rank's features.
  add("encoded", BTl * C);  // the embeddings' output, or the previous stage's
  for (int l = st.first_block; l < st.first_block + st.blocks(c.layers); ++l) {
    const std::string p = fmt::format("h.{}.", l);
    add(p + "ln1", BTl * C), add(p + "ln1_mean", BTl), add(p + "ln1_rstd", BTl);
    if (sp) add(p + "ln1_full", BT * C);
    add(p + "qkv", BT * 3 * Cl), add(p + "atty", BT * Cl), add(p + "att", att);
    add(p + "res2", BTl * C);
    add(p + "ln2", BTl * C), add(p + "ln2_mean", BTl), add(p + "ln2_rstd", BTl);
    if (sp) add(p + "ln2_full", BT * C);
    add(p + "fch", BT * Fl), add(p + "fch_gelu", BT * Fl), add(p + "res3", BTl * C);
  }
  if (st.head) {
    add("lnf", BTl * C), add("lnf_mean", BTl), add("lnf_rstd", BTl);
    if (sp) add("lnf_full", BT * C);
    add("logits", BT * tp.local_vocab(c)), add("losses", BT);
    add("xent_max", BT), add("xent_packed", 2 * BT);
  }
  if (!st.embedding) add("d_input", BTl * C);  // sent to the previous stage
  return t;
}

TensorTable GptModel::scratch_table(const GptConfig& c, int micro_batch,
                                    const TensorParallelLayout& tp) {
  // Reused layer after layer and micro-batch after micro-batch: activation
  // gradients are never kept for the whole stack. Counted as activations.
  const std::int64_t BT = std::int64_t(micro_batch) * c.seq_len, BTl = tp.local_tokens(int(BT));
  const std::int64_t C = c.d_model, Cl = tp.local_width(c), Fl = tp.local_ff(c);
  const std::int64_t att = std::int64_t(micro_batch) * tp.local_heads(c) * c.seq_len * c.seq_len;
  TensorTable t;
  auto add = [&t](std::string name, std::int64_t n) { add_flat(t, std::move(name), n); };
  add("full_c", BT * C), add("d_res", BTl * C), add("d_c", BT * C), add("d_3c", BT * 3 * Cl);
  add("d_ff_a", BT * Fl), add("d_ff_b", BT * Fl), add("d_att", att);
  if (tp.sp()) add("local_c", BTl * C), add("sp_pack", 4 * C);
  return t;
}

GptModel::Block GptModel::block(int slot, int l) {
  const std::string p = fmt::format("h.{}.", l);
  auto a = [&](const char* n) { return act(slot, p + n); };
  const bool sp = tp_.sp();
  Block b{a("ln1"), a("ln1_mean"), a("ln1_rstd"), nullptr, a("qkv"), a("atty"), a("att"),
          a("res2"), a("ln2"), a("ln2_mean"), a("ln2_rstd"), nullptr, a("fch"), a("fch_gelu"),
          a("res3")};
  b.ln1_full = sp ? a("ln1_full") : b.ln1;  // without SP the local norm output is all tokens
  b.ln2_full = sp ? a("ln2_full") : b.ln2;
  return b;
}

const float* GptModel::output(int slot) {
  return last_block() > stage_.first_block ? block(slot, last_block() - 1).res3
                                           : act(slot, "encoded");
}

FullStorage& GptModel::full() {
  if (!own_storage_) throw std::logic_error("the model's parameters live in a sharded storage");
  return *own_storage_;
}

void GptModel::init_parameters(std::uint64_t seed) {
  std::vector<float> host(table_.size(), 0.0f);
  init_gpt_params(table_, host.data(), cfg_, seed);
  storage_->set_params_from_host(host);
}

const float* GptModel::reduce_row_parallel(float* full) {
  if (!tp_.sp()) {
    tcomm_.all_reduce(full, std::size_t(BT_) * cfg_.d_model);
    return full;
  }
  float* local = scratch("local_c");
  tcomm_.reduce_scatter_tokens(full, local, std::size_t(BTl_) * cfg_.d_model);
  return local;
}

const float* GptModel::gather(const float* local, float* full) {
  if (!tp_.sp()) return local;
  tcomm_.gather_tokens(local, full, std::size_t(BTl_) * cfg_.d_model);
  return full;
}

void GptModel::sum_partial_grads(const std::vector<std::string>& names) {
  if (!tp_.sp()) return;
  // Pack the small tensors so the group does one all-reduce, not one each.
  float* pack = scratch("sp_pack");
  std::size_t n = 0;
  for (const auto& name : names) {
    const TensorInfo& t = table_.at(name);
    backend_.copy(pack + n, storage_->grad(t), t.numel * sizeof(float));
    n += t.numel;
  }
  tcomm_.all_reduce(pack, n);
  n = 0;
  for (const auto& name : names) {
    const TensorInfo& t = table_.at(name);
    backend_.copy(storage_->grad(t), pack + n, t.numel * sizeof(float));
    n += t.numel;
  }
}

}  // namespace trident
