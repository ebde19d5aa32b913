// The token embedding (and tied head) over a table that may be cut into row
// pieces spread over several units (ZeRO-3: no slot holds the whole table).
// A piece's logits are a column block of the logits: they go through a
// contiguous scratch of at most d_model columns (full_c, idle while the head
// runs), so no buffer grows with the vocabulary. A 16-bit table that is one
// unit (stages 0-2) is read the same way, d_model rows at a time through the
// storage's window (ModelStorage::table_in_windows), but held as one unit
// from the head's forward to its backward.
#include "model/gpt.hpp"

namespace trident {

std::vector<GptModel::TableUnit> GptModel::table_units(const TensorTable& table, int d_model) {
  const TensorInfo* w = table.find("wte");
  if (!w) return {};
  const int vocab = int(w->shape[0]);
  if (w->units <= 1) return {TableUnit{w->unit, {{0, vocab}}}};
  std::vector<TableUnit> units;
  for (int k = 0; k < w->units; ++k) units.push_back({w->unit + k, {}});
  const int rows = int(w->piece / std::size_t(d_model));
  for (int j = 0; j < w->pieces; ++j)
    if (j * rows < vocab) units[j % w->units].rows.push_back({j * rows, std::min(rows, vocab - j * rows)});
  return units;
}

namespace {
// Calls f(first row, rows) over `u`'s pieces in blocks of at most `most` rows.
template <class F>
void for_each_row_block(const std::vector<std::pair<int, int>>& pieces, int most, F&& f) {
  for (const auto& [first, rows] : pieces)
    for (int r = 0; r < rows; r += most) f(first + r, std::min(most, rows - r));
}
}  // namespace

void GptModel::lookup_tokens(float* out, const std::int32_t* tok) {
  const int C = cfg_.d_model, vlo = tp_.vocab_begin(cfg_);
  const TensorInfo& w = *ends_.wte;
  float* part = scratch(scratch_handles_.d_c);  // free in forward
  const int most = storage_->table_in_windows() ? C : tp_.local_vocab(cfg_);
  bool first = true;
  for (const TableUnit& u : table_units_) {
    storage_->need_params(u.unit, Pass::forward);
    if (const std::uint16_t* bits = table_cut() ? nullptr : table_bits()) {
      // A whole table held as bf16: the lookup reads its bits where they are.
      bf16_ops_->embedding_forward_bits(out, tok, bits, vlo, u.rows.front().second, all_tokens_, C);
      storage_->done_params(u.unit);
      return;
    }
    for_each_row_block(u.rows, most, [&](int row, int rows) {
      // Tokens outside a piece look up zeros: the pieces' lookups add up.
      const std::size_t at = std::size_t(row) * C;
      backend_.embedding_forward(first ? out : part, tok,
                                 storage_->param_rows(w, at, std::size_t(rows) * C), vlo + row,
                                 rows, all_tokens_, C);
      if (!first) backend_.add(out, out, part, std::size_t(all_tokens_) * C);
      first = false;
    });
    storage_->done_params(u.unit);
  }
}

void GptModel::logits_forward(float* logits, const float* lnf) {
  const int C = cfg_.d_model, Vl = tp_.local_vocab(cfg_);
  ModelStorage& st = *storage_;
  const bool cut = table_cut();
  if (!cut) {
    st.need_params(ends_.wte->unit, Pass::forward);  // held until the head's backward
    if (const std::uint16_t* bits = table_bits())
      return bf16_ops_->matmul_forward(logits, bf16_valued(lnf), MatrixIn(nullptr, bits), nullptr,
                                     all_tokens_, C, Vl);
    if (!st.table_in_windows())
      return bf16_ops_->matmul_forward(logits, bf16_valued(lnf), bf16_valued(param(ends_.wte)), nullptr, all_tokens_,
                                     C, Vl);
  }
  const TensorInfo& w = *ends_.wte;
  float* part = scratch(scratch_handles_.full_c);
  for (const TableUnit& u : table_units_) {
    if (cut) st.need_params(u.unit, Pass::forward);
    for_each_row_block(u.rows, C, [&](int row, int rows) {
      const std::size_t at = std::size_t(row) * C;
      bf16_ops_->matmul_forward(part, bf16_valued(lnf),
                              bf16_valued(st.param_rows(w, at, std::size_t(rows) * C)), nullptr,
                              all_tokens_, C, rows);
      backend_.copy_2d(logits + row, std::size_t(Vl), part, std::size_t(rows), std::size_t(all_tokens_),
                       std::size_t(rows));
    });
    if (cut) st.done_params(u.unit);
  }
}

void GptModel::logits_backward(const MicroBatchActs& acts, float* d_lnf, const float* lnf_all, bool weight_grads,
                               bool finalize) {
  const int C = cfg_.d_model, Vl = tp_.local_vocab(cfg_);
  ModelStorage& st = *storage_;
  float* dlogits = act(acts, ends_.logits);
  // bf16 runs hold the logits' gradient as bf16 values (forward rounded it).
  const bool cut = table_cut();
  if (!cut) {  // the whole table is still held from forward
    if (weight_grads) st.need_grads(ends_.wte->unit);
    const std::uint16_t* bits = table_bits();
    if (bits || !st.table_in_windows()) {
      const MatrixIn w = !d_lnf ? MatrixIn(nullptr) : bits ? MatrixIn(nullptr, bits)
                                                           : bf16_valued(param(ends_.wte));
      return bf16_ops_->matmul_backward(d_lnf, weight_grads ? grad(ends_.wte) : nullptr, nullptr,
                                      bf16_valued(dlogits), bf16_valued(lnf_all), w, all_tokens_, C, Vl,
                                      InputGrad::add);
    }
  }
  // A cut table's units each leave now and the embedding's backward starts
  // its own gradients: holding them until then would hold the whole table.
  const TensorInfo& w = *ends_.wte;
  float* part = scratch(scratch_handles_.full_c);
  for (const TableUnit& u : table_units_) {
    if (cut && d_lnf) st.need_params(u.unit, Pass::backward);
    if (cut && weight_grads) st.need_grads(u.unit);
    for_each_row_block(u.rows, C, [&](int row, int rows) {
      const std::size_t at = std::size_t(row) * C;
      backend_.copy_2d(part, std::size_t(rows), dlogits + row, std::size_t(Vl), std::size_t(all_tokens_),
                       std::size_t(rows));
      const std::size_t n = std::size_t(rows) * C;
      bf16_ops_->matmul_backward(d_lnf, weight_grads ? st.grad_rows(w, at, n) : nullptr, nullptr,
                               bf16_valued(part), bf16_valued(lnf_all),
                               bf16_valued(d_lnf ? st.param_rows(w, at, n) : nullptr), all_tokens_, C,
                               rows, InputGrad::add);
      if (weight_grads) st.done_grad_rows(w, at, n);
    });
    if (cut && d_lnf) st.done_params(u.unit);
    if (cut && weight_grads) st.done_grads(u.unit, finalize);
  }
}

void GptModel::table_grads_from_tokens(const MicroBatchActs& acts, const float* d_emb, bool finalize) {
  const int C = cfg_.d_model, vlo = tp_.vocab_begin(cfg_);
  const TensorInfo& w = *ends_.wte;
  const int most = storage_->table_grads_in_windows() ? C : tp_.local_vocab(cfg_);
  for (const TableUnit& u : table_units_) {
    storage_->need_grads(u.unit);
    for_each_row_block(u.rows, most, [&](int row, int rows) {
      const std::size_t at = std::size_t(row) * C, n = std::size_t(rows) * C;
      backend_.embedding_backward(storage_->grad_rows(w, at, n), d_emb, acts.tokens, vlo + row,
                                  rows, all_tokens_, C);
      storage_->done_grad_rows(w, at, n);
    });
    storage_->done_grads(u.unit, finalize);
  }
}

}  // namespace trident
